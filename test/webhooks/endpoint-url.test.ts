import { validateEndpointUrl } from '../../src/webhooks/endpoint-url';

type Expected = { ok: true; url: string } | string;

const base = 'https://hooks.example.com/';
const longPath = (total: number) => base + 'a'.repeat(total - base.length);

// [input, expected normalised URL or error code, why it is tricky]
const CASES: Array<[unknown, Expected, string]> = [
  ['https://hooks.example.com/webhook', { ok: true, url: 'https://hooks.example.com/webhook' }, 'plain https URL'],
  ['HTTPS://Hooks.Example.COM/Path', { ok: true, url: 'https://hooks.example.com/Path' }, 'uppercase scheme and host are normalised, path case kept'],
  ['https://hooks.example.com:8443/x?y=1', { ok: true, url: 'https://hooks.example.com:8443/x?y=1' }, 'explicit port and query'],
  ['https://hooks.example.com:443/x', { ok: true, url: 'https://hooks.example.com/x' }, 'default port dropped'],
  ['https://bücher.example/hook', { ok: true, url: 'https://xn--bcher-kva.example/hook' }, 'IDN host becomes punycode'],
  ['https://8.8.8.8/hook', { ok: true, url: 'https://8.8.8.8/hook' }, 'public IPv4 literal'],
  ['https://[2606:4700:4700::1111]/hook', { ok: true, url: 'https://[2606:4700:4700::1111]/hook' }, 'public IPv6 literal'],
  [longPath(2048), { ok: true, url: longPath(2048) }, 'exactly 2048 characters'],
  [undefined, 'WEBHOOK_URL_REQUIRED', 'missing'],
  [42, 'WEBHOOK_URL_REQUIRED', 'not a string'],
  ['', 'WEBHOOK_URL_REQUIRED', 'empty string'],
  ['   ', 'WEBHOOK_URL_REQUIRED', 'only whitespace'],
  [longPath(2049), 'WEBHOOK_URL_TOO_LONG', '2049 characters'],
  ['https:/hooks.example.com', 'WEBHOOK_URL_INVALID', 'one slash, which the parser would repair'],
  ['https:hooks.example.com', 'WEBHOOK_URL_INVALID', 'no slashes, which the parser would repair'],
  ['https:\\\\hooks.example.com', 'WEBHOOK_URL_INVALID', 'backslashes, which the parser would repair'],
  ['https:///hooks.example.com', 'WEBHOOK_URL_INVALID', 'three slashes, empty authority'],
  ['https://', 'WEBHOOK_URL_INVALID', 'empty host'],
  ['https://:443/', 'WEBHOOK_URL_INVALID', 'port without host'],
  [' https://hooks.example.com/', 'WEBHOOK_URL_INVALID', 'leading whitespace'],
  ['https://hooks.example.com/a b', 'WEBHOOK_URL_INVALID', 'inner space'],
  ['https://hooks.exa\tmple.com/', 'WEBHOOK_URL_INVALID', 'tab the parser would silently drop'],
  ['https://hooks.example.com/\n', 'WEBHOOK_URL_INVALID', 'trailing newline'],
  ['hooks.example.com/webhook', 'WEBHOOK_URL_INVALID', 'no scheme'],
  ['//hooks.example.com/webhook', 'WEBHOOK_URL_INVALID', 'scheme-relative'],
  ['https://exa<mple.com/', 'WEBHOOK_URL_INVALID', 'forbidden host code point'],
  ['https://1.2.3.4.5/', 'WEBHOOK_URL_INVALID', 'numeric last label that is not an IPv4 address'],
  ['https://hooks.example.com:0/', 'WEBHOOK_URL_INVALID', 'port 0'],
  ['https://hooks.example.com:65536/', 'WEBHOOK_URL_INVALID', 'port out of range'],
  ['javascript:alert(1)', 'WEBHOOK_URL_NOT_HTTPS', 'javascript: scheme'],
  ['ftp://hooks.example.com/', 'WEBHOOK_URL_NOT_HTTPS', 'ftp: scheme'],
  ['http://hooks.example.com/', 'WEBHOOK_URL_NOT_HTTPS', 'plain http'],
  ['wss://hooks.example.com/', 'WEBHOOK_URL_NOT_HTTPS', 'websocket scheme'],
  ['data:text/plain,hi', 'WEBHOOK_URL_NOT_HTTPS', 'data: URL'],
  ['https://user:pass@hooks.example.com/', 'WEBHOOK_URL_HAS_CREDENTIALS', 'user and password'],
  ['https://user@hooks.example.com/', 'WEBHOOK_URL_HAS_CREDENTIALS', 'user only'],
  ['https://hooks.example.com@evil.example/', 'WEBHOOK_URL_HAS_CREDENTIALS', 'host-looking user name'],
  ['https://hooks.example.com/#frag', 'WEBHOOK_URL_HAS_FRAGMENT', 'fragment'],
  ['https://hooks.example.com/#', 'WEBHOOK_URL_HAS_FRAGMENT', 'empty fragment'],
  ['https://2130706433/', 'WEBHOOK_URL_FORBIDDEN_ADDRESS', 'decimal integer 127.0.0.1'],
  ['https://0177.0.0.1/', 'WEBHOOK_URL_FORBIDDEN_ADDRESS', 'octal 127.0.0.1'],
  ['https://0x7f.1/', 'WEBHOOK_URL_FORBIDDEN_ADDRESS', 'hex short form 127.0.0.1'],
  ['https://127.1/', 'WEBHOOK_URL_FORBIDDEN_ADDRESS', 'short form 127.0.0.1'],
  ['https://0/', 'WEBHOOK_URL_FORBIDDEN_ADDRESS', '0 is 0.0.0.0'],
  ['https://127。0。0。1/', 'WEBHOOK_URL_FORBIDDEN_ADDRESS', 'ideographic full stops map to dots'],
  ['https://[::ffff:127.0.0.1]/', 'WEBHOOK_URL_FORBIDDEN_ADDRESS', 'IPv4-mapped loopback'],
  ['https://[::1]/', 'WEBHOOK_URL_FORBIDDEN_ADDRESS', 'IPv6 loopback'],
  ['https://[fe80::1]/', 'WEBHOOK_URL_FORBIDDEN_ADDRESS', 'IPv6 link-local'],
  ['https://[fd00:ec2::254]/', 'WEBHOOK_URL_FORBIDDEN_ADDRESS', 'AWS metadata IPv6'],
  ['https://[64:ff9b::a9fe:a9fe]/', 'WEBHOOK_URL_FORBIDDEN_ADDRESS', 'NAT64 of metadata'],
  ['https://169.254.169.254/latest', 'WEBHOOK_URL_FORBIDDEN_ADDRESS', 'cloud metadata'],
  ['https://10.0.0.1/', 'WEBHOOK_URL_FORBIDDEN_ADDRESS', 'private'],
  ['https://100.64.0.1/', 'WEBHOOK_URL_FORBIDDEN_ADDRESS', 'CGNAT'],
  ['https://localhost/', 'WEBHOOK_URL_FORBIDDEN_ADDRESS', 'localhost'],
  ['https://LOCALHOST:8443/', 'WEBHOOK_URL_FORBIDDEN_ADDRESS', 'uppercase localhost with port'],
  ['https://localhost./', 'WEBHOOK_URL_FORBIDDEN_ADDRESS', 'localhost with trailing dot'],
  ['https://foo.localhost/', 'WEBHOOK_URL_FORBIDDEN_ADDRESS', 'subdomain of localhost'],
  ['https://%6c%6fcalhost/', 'WEBHOOK_URL_FORBIDDEN_ADDRESS', 'percent-encoded localhost'],
  ['https://ⓛⓞⓒⓐⓛⓗⓞⓢⓣ/', 'WEBHOOK_URL_FORBIDDEN_ADDRESS', 'circled letters map to localhost'],
  ['https://metadata.google.internal/computeMetadata/v1/', 'WEBHOOK_URL_FORBIDDEN_ADDRESS', 'GCP metadata name'],
  ['https://db.internal/', 'WEBHOOK_URL_FORBIDDEN_ADDRESS', '.internal'],
  ['https://printer.local/', 'WEBHOOK_URL_FORBIDDEN_ADDRESS', 'mDNS .local'],
  ['https://intranet/', 'WEBHOOK_URL_FORBIDDEN_ADDRESS', 'single-label name'],
];

describe(`validateEndpointUrl: ${CASES.length} URLs`, () => {
  it.each(CASES)('%j → %j (%s)', (input, expected) => {
    const result = validateEndpointUrl(input);
    if (typeof expected === 'string') {
      expect(result).toMatchObject({ ok: false, code: expected });
    } else {
      expect(result).toEqual(expected);
    }
  });

  it(`covers ${CASES.length} URLs, at least 30 of them`, () => {
    expect(CASES.length).toBeGreaterThanOrEqual(30);
  });

  it('explains every refusal in a sentence an API client can show', () => {
    for (const [input, expected] of CASES) {
      const result = validateEndpointUrl(input);
      if (result.ok || typeof expected !== 'string') continue;
      expect(result.message).toMatch(/^The webhook URL .+\.$|^A webhook URL is required\.$/);
    }
  });
});

describe('validateEndpointUrl with a loopback allow-list', () => {
  const allowCidrs = ['127.0.0.0/8', '::1/128'];

  it.each([
    ['https://127.0.0.1:8443/hook', 'https://127.0.0.1:8443/hook'],
    ['https://[::1]:8443/hook', 'https://[::1]:8443/hook'],
    ['https://localhost:8443/hook', 'https://localhost:8443/hook'],
    ['https://2130706433/hook', 'https://127.0.0.1/hook'],
  ])('lets %s through as %s', (input, url) => {
    expect(validateEndpointUrl(input, { allowCidrs })).toEqual({ ok: true, url });
  });

  it.each(['https://10.0.0.1/', 'https://169.254.169.254/', 'https://metadata.google.internal/', 'https://db.internal/'])(
    'still refuses %s',
    (input) => {
      expect(validateEndpointUrl(input, { allowCidrs })).toMatchObject({ ok: false, code: 'WEBHOOK_URL_FORBIDDEN_ADDRESS' });
    },
  );

  it('still refuses http:// on loopback', () => {
    expect(validateEndpointUrl('http://127.0.0.1:8443/', { allowCidrs })).toMatchObject({ ok: false, code: 'WEBHOOK_URL_NOT_HTTPS' });
  });
});
