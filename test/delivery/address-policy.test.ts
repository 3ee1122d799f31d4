import { classifyAddress, createAddressPolicy, type ForbiddenReason } from '../../src/outbound';
import { createOutboundClient, OutboundError } from '../../src/outbound';
import { startHttpsReceiver, type HttpsReceiver } from '../support/https-receiver';
import { makeTestTls } from '../support/tls';

type Expectation = 'allowed' | ForbiddenReason;

// [address, expected verdict, why it is interesting]
const TARGETS: Array<[string, Expectation, string]> = [
  ['8.8.8.8', 'allowed', 'public IPv4'],
  ['1.1.1.1', 'allowed', 'public IPv4'],
  ['93.184.215.14', 'allowed', 'public IPv4'],
  ['2606:4700:4700::1111', 'allowed', 'public IPv6'],
  ['2001:4860:4860::8888', 'allowed', 'public IPv6'],
  ['::ffff:8.8.8.8', 'allowed', 'IPv4-mapped public address'],
  ['64:ff9b::808:808', 'allowed', 'NAT64 of a public address'],
  ['2002:808:808::1', 'allowed', '6to4 of a public address'],
  ['127.0.0.1', 'loopback', 'IPv4 loopback'],
  ['127.255.255.254', 'loopback', 'anywhere in 127/8'],
  ['::1', 'loopback', 'IPv6 loopback'],
  ['10.0.0.1', 'private', 'RFC 1918 10/8'],
  ['172.16.0.1', 'private', 'RFC 1918 172.16/12 low end'],
  ['172.31.255.255', 'private', 'RFC 1918 172.16/12 high end'],
  ['172.32.0.1', 'allowed', 'just outside 172.16/12'],
  ['192.168.1.1', 'private', 'RFC 1918 192.168/16'],
  ['169.254.1.1', 'link_local', 'IPv4 link-local'],
  ['fe80::1', 'link_local', 'IPv6 link-local'],
  ['fe80::1%eth0', 'link_local', 'IPv6 link-local with zone'],
  ['100.64.0.1', 'carrier_grade_nat', 'CGNAT 100.64/10'],
  ['100.127.255.255', 'carrier_grade_nat', 'CGNAT high end'],
  ['169.254.169.254', 'metadata', 'cloud metadata IPv4'],
  ['fd00:ec2::254', 'metadata', 'AWS metadata IPv6'],
  ['168.63.129.16', 'metadata', 'Azure WireServer'],
  ['0.0.0.0', 'unspecified', 'IPv4 unspecified'],
  ['::', 'unspecified', 'IPv6 unspecified'],
  ['255.255.255.255', 'broadcast', 'limited broadcast'],
  ['224.0.0.1', 'multicast', 'IPv4 multicast'],
  ['ff02::1', 'multicast', 'IPv6 multicast'],
  ['240.0.0.1', 'reserved', 'class E'],
  ['192.0.2.10', 'reserved', 'TEST-NET-1 documentation'],
  ['198.18.0.1', 'benchmarking', 'RFC 2544 benchmarking'],
  ['2001:2::1', 'benchmarking', 'IPv6 benchmarking'],
  ['2001:db8::1', 'reserved', 'IPv6 documentation'],
  ['fc00::1', 'unique_local', 'IPv6 unique-local fc00::/7'],
  ['fd12:3456::1', 'unique_local', 'IPv6 unique-local fd'],
  ['::ffff:127.0.0.1', 'loopback', 'IPv4-mapped loopback, dotted form'],
  ['::ffff:7f00:1', 'loopback', 'IPv4-mapped loopback, hex form'],
  ['::ffff:a9fe:a9fe', 'metadata', 'IPv4-mapped metadata, hex form'],
  ['::ffff:0:a00:1', 'private', 'IPv4-translated (SIIT) 10.0.0.1'],
  ['64:ff9b::7f00:1', 'loopback', 'NAT64 of loopback'],
  ['64:ff9b::10.0.0.1', 'private', 'NAT64 of a private address, dotted form'],
  ['64:ff9b:1::a9fe:a9fe', 'metadata', 'local-use NAT64 /96 of metadata'],
  ['64:ff9b:1:ab::1', 'reserved', 'local-use NAT64 with an unknown layout'],
  ['2002:7f00:1::1', 'loopback', '6to4 of loopback'],
  ['2002:c0a8:101::1', 'private', '6to4 of 192.168.1.1'],
  ['2001:0:4136:e378:8000:63bf:80ff:fffe', 'loopback', 'Teredo whose client is 127.0.0.1'],
  ['2001:0:a00:1:8000:63bf:f7f7:f7f7', 'private', 'Teredo whose server is 10.0.0.1'],
  ['::127.0.0.1', 'loopback', 'IPv4-compatible loopback'],
  ['::a9fe:a9fe', 'metadata', 'IPv4-compatible metadata'],
  ['4000::1', 'reserved', 'IPv6 outside 2000::/3'],
  ['0177.0.0.1', 'invalid', 'octal form is refused, not guessed'],
  ['2130706433', 'invalid', 'integer form is refused, not guessed'],
  ['localhost', 'invalid', 'a name, not an address'],
];

describe(`address policy: ${TARGETS.length} targets`, () => {
  it.each(TARGETS)('%s → %s (%s)', (address, expected) => {
    const verdict = classifyAddress(address);
    expect(verdict.allowed ? 'allowed' : verdict.reason).toBe(expected);
  });

  it(`judges all ${TARGETS.length} targets, at least 25 of them`, () => {
    expect(TARGETS.length).toBeGreaterThanOrEqual(25);
  });

  it('names the embedded IPv4 address it judged', () => {
    expect(classifyAddress('64:ff9b::7f00:1')).toEqual({ allowed: false, reason: 'loopback', embeddedIPv4: '127.0.0.1' });
  });
});

describe('address policy allow-list', () => {
  const policy = createAddressPolicy(['127.0.0.0/8', '::1/128']);

  it.each(['127.0.0.1', '::1', '::ffff:127.0.0.1'])('lets allow-listed %s through', (address) => {
    expect(policy(address)).toEqual({ allowed: true });
  });

  it('leaves addresses outside the allow-list forbidden', () => {
    expect(policy('10.0.0.1')).toMatchObject({ allowed: false, reason: 'private' });
  });

  it('never opens cloud metadata, even when a broad allow-list covers it', () => {
    expect(createAddressPolicy(['169.254.0.0/16'])('169.254.169.254')).toMatchObject({ allowed: false, reason: 'metadata' });
    expect(createAddressPolicy(['169.254.0.0/16'])('169.254.1.1')).toEqual({ allowed: true });
  });

  it('does not extend to IPv4 addresses reached through a NAT64 gateway', () => {
    expect(policy('64:ff9b::7f00:1')).toMatchObject({ allowed: false, reason: 'loopback' });
  });

  it('rejects a malformed CIDR when the policy is built', () => {
    expect(() => createAddressPolicy(['127.0.0.0/33'])).toThrow(/Invalid CIDR/);
  });
});

describe('connect-time check on resolved addresses', () => {
  let receiver: HttpsReceiver;
  let port: string;

  beforeAll(async () => {
    receiver = await startHttpsReceiver({ tls: await makeTestTls() });
    port = new URL(receiver.url).port;
  });

  afterAll(() => receiver.close());

  const RESOLVED: Array<[string, string[]]> = [
    ['a name resolving to loopback', ['127.0.0.1']],
    ['a name resolving to a private address', ['10.1.2.3']],
    ['a name resolving to cloud metadata', ['169.254.169.254']],
    ['a name resolving to IPv6 loopback', ['::1']],
    ['a name resolving to an IPv4-mapped loopback', ['::ffff:127.0.0.1']],
    ['a name resolving to one public and one private address', ['93.184.215.14', '192.168.0.10']],
  ];

  it.each(RESOLVED)('refuses %s with blocked_address and sends nothing', async (_label, addresses) => {
    const lookup = jest.fn(async () => addresses.map((address) => ({ address, family: (address.includes(':') ? 6 : 4) as 4 | 6 })));
    const client = createOutboundClient({ timeoutMs: 2000, maxResponseBytes: 1024, lookup });

    const err = await client.post(`https://hooks.customer.example:${port}/hook`, {}, '{}').catch((e: unknown) => e);

    expect(err).toBeInstanceOf(OutboundError);
    expect(err).toMatchObject({ kind: 'blocked_address' });
    expect(lookup).toHaveBeenCalledWith('hooks.customer.example');
    expect(receiver.requests).toHaveLength(0);
  });

  it('resolves again for every new connection, so a name that rebinds to a forbidden address is refused once its pooled connection has aged out', async () => {
    // 127.0.0.1 is allow-listed here (it is the receiver); 127.0.0.2 plays the internal target.
    const answers = ['127.0.0.1', '127.0.0.2'];
    const lookup = jest.fn(async () => [{ address: answers.shift() ?? '127.0.0.2', family: 4 as const }]);
    const client = createOutboundClient({
      allowCidrs: ['127.0.0.1/32'],
      extraCa: (await makeTestTls()).caPem,
      timeoutMs: 2000,
      maxResponseBytes: 1024,
      lookup,
      // Every connection is past its age by the next post: the second one dials anew.
      connectionMaxAgeMs: 0,
    });

    await expect(client.post(`https://localhost:${port}/first`, {}, '{}')).resolves.toMatchObject({ status: 200 });
    await expect(client.post(`https://localhost:${port}/second`, {}, '{}')).rejects.toMatchObject({ kind: 'blocked_address' });
    expect(lookup).toHaveBeenCalledTimes(2);
    expect(receiver.requests.map((r) => r.path)).toEqual(['/first']);
  });
});
