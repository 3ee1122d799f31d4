/**
 * Which IP addresses the service may send webhooks to (DESIGN decision 7).
 *
 * Only global unicast passes. IPv6 forms that carry an IPv4 address (mapped,
 * translated, NAT64, 6to4, Teredo, IPv4-compatible) are judged by that IPv4 address,
 * because a gateway or the kernel may deliver them to it. An allow-list of CIDRs
 * (tests, local development) overrides everything except cloud metadata addresses.
 */
import ipaddr from 'ipaddr.js';

type IPv4 = ipaddr.IPv4;
type IPv6 = ipaddr.IPv6;
type IP = IPv4 | IPv6;

export type ForbiddenReason =
  | 'invalid'
  | 'metadata'
  | 'loopback'
  | 'private'
  | 'link_local'
  | 'carrier_grade_nat'
  | 'multicast'
  | 'broadcast'
  | 'unspecified'
  | 'benchmarking'
  | 'unique_local'
  | 'reserved';

export type AddressVerdict =
  | { allowed: true }
  | {
      allowed: false;
      reason: ForbiddenReason;
      /** The IPv4 address the verdict was based on, when it was embedded in an IPv6 one. */
      embeddedIPv4?: string;
    };

/** Words for a reason, for messages shown to API clients and stored as a delivery's last error. */
export const FORBIDDEN_REASON_TEXT: Record<ForbiddenReason, string> = {
  invalid: 'not a valid IP address',
  metadata: 'a cloud metadata address',
  loopback: 'a loopback address',
  private: 'a private network address',
  link_local: 'a link-local address',
  carrier_grade_nat: 'a carrier-grade NAT address',
  multicast: 'a multicast address',
  broadcast: 'the broadcast address',
  unspecified: 'the unspecified address',
  benchmarking: 'a benchmarking address',
  unique_local: 'an IPv6 unique-local address',
  reserved: 'a reserved or non-global address',
};

/** Judges one IP address string; built once per configuration. */
export type AddressPolicy = (address: string) => AddressVerdict;

/*
 * Metadata services hand out cloud credentials, so the allow-list cannot open them:
 * a test allow-list such as 169.254.0.0/16 must not expose them by accident.
 * 168.63.129.16 (Azure WireServer) looks public but is only reachable from inside Azure.
 */
const METADATA: Array<[IP, number]> = [
  ipaddr.parseCIDR('169.254.169.254/32'),
  ipaddr.parseCIDR('168.63.129.16/32'),
  ipaddr.parseCIDR('fd00:ec2::254/128'),
];

const IPV4_REASONS: Record<string, ForbiddenReason> = {
  unspecified: 'unspecified',
  broadcast: 'broadcast',
  multicast: 'multicast',
  linkLocal: 'link_local',
  loopback: 'loopback',
  carrierGradeNat: 'carrier_grade_nat',
  private: 'private',
};

const IPV6_REASONS: Record<string, ForbiddenReason> = {
  unspecified: 'unspecified',
  linkLocal: 'link_local',
  multicast: 'multicast',
  loopback: 'loopback',
  uniqueLocal: 'unique_local',
  benchmarking: 'benchmarking',
};

// ipaddr.js files RFC 2544 benchmarking space under "reserved"; it gets its own reason.
const IPV4_BENCHMARKING = ipaddr.parseCIDR('198.18.0.0/15');
// Global unicast space; ipaddr.js calls unassigned space outside it "unicast" too.
const IPV6_GLOBAL_UNICAST = ipaddr.parseCIDR('2000::/3');
const NAT64_LOCAL_USE = ipaddr.parseCIDR('64:ff9b:1::/48');

/**
 * Builds a policy. Throws on a malformed CIDR so bad configuration fails at start.
 * `allowCidrs` example for tests: ['127.0.0.0/8', '::1/128'].
 */
export function createAddressPolicy(allowCidrs: readonly string[] = []): AddressPolicy {
  const allowList = allowCidrs.map((cidr) => {
    try {
      return ipaddr.parseCIDR(cidr.trim());
    } catch {
      throw new Error(`Invalid CIDR in the outbound allow-list: "${cidr}"`);
    }
  });

  return (address) => {
    const parsed = parseStrict(address);
    if (!parsed) return { allowed: false, reason: 'invalid' };
    // An IPv4-mapped address is the same socket address as the IPv4 one on a dual-stack host.
    const ip = parsed.kind() === 'ipv6' && (parsed as IPv6).isIPv4MappedAddress() ? (parsed as IPv6).toIPv4Address() : parsed;

    if (matchesAny(ip, METADATA)) return { allowed: false, reason: 'metadata' };
    if (matchesAny(ip, allowList)) return { allowed: true };
    return ip.kind() === 'ipv4' ? judgeIPv4(ip as IPv4) : judgeIPv6(ip as IPv6);
  };
}

/** One-off check; prefer createAddressPolicy when judging many addresses. */
export function classifyAddress(address: string, allowCidrs: readonly string[] = []): AddressVerdict {
  return createAddressPolicy(allowCidrs)(address);
}

/** True when `value` is an IPv4 dotted quad or an IPv6 address (no brackets). */
export function isIpLiteral(value: string): boolean {
  return parseStrict(value) !== null;
}

// Only canonical dotted quads: inet_aton-style forms (0x7f.1, 2130706433) must never
// reach here unnormalised, because different parsers disagree on what they mean.
function parseStrict(address: string): IP | null {
  if (ipaddr.IPv4.isValidFourPartDecimal(address)) return ipaddr.IPv4.parse(address);
  if (address.includes(':') && ipaddr.IPv6.isValid(address)) return ipaddr.IPv6.parse(address);
  return null;
}

function matchesAny(ip: IP, ranges: ReadonlyArray<[IP, number]>): boolean {
  return ranges.some(([range, bits]) => range.kind() === ip.kind() && ip.match(range, bits));
}

function judgeIPv4(ip: IPv4): AddressVerdict {
  if (matchesAny(ip, METADATA)) return { allowed: false, reason: 'metadata' };
  if (ip.match(IPV4_BENCHMARKING)) return { allowed: false, reason: 'benchmarking' };
  const range = ip.range();
  if (range === 'unicast') return { allowed: true };
  return { allowed: false, reason: IPV4_REASONS[range] ?? 'reserved' };
}

function judgeIPv6(ip: IPv6): AddressVerdict {
  const embedded = embeddedIPv4(ip);
  if (embedded === 'unknown') return { allowed: false, reason: 'reserved' };
  if (embedded) {
    for (const v4 of embedded) {
      const verdict = judgeIPv4(v4);
      if (!verdict.allowed) return { ...verdict, embeddedIPv4: v4.toString() };
    }
    return { allowed: true };
  }

  const range = ip.range();
  if (range === 'unicast' && ip.match(IPV6_GLOBAL_UNICAST)) return { allowed: true };
  return { allowed: false, reason: IPV6_REASONS[range] ?? 'reserved' };
}

/**
 * The IPv4 addresses an IPv6 address leads to, null when it carries none, or
 * 'unknown' when it carries one at a position we cannot tell.
 */
function embeddedIPv4(ip: IPv6): IPv4[] | null | 'unknown' {
  const p = ip.parts as [number, number, number, number, number, number, number, number];
  const fromWords = (hi: number, lo: number) => new ipaddr.IPv4([hi >> 8, hi & 0xff, lo >> 8, lo & 0xff]);
  const last32 = () => [fromWords(p[6], p[7])];

  switch (ip.range()) {
    case 'ipv4Mapped': // ::ffff:a.b.c.d
    case 'rfc6145': // ::ffff:0:a.b.c.d (SIIT)
      return last32();
    case 'rfc6052': // NAT64: 64:ff9b::/96, or the local-use 64:ff9b:1::/48
      if (!ip.match(NAT64_LOCAL_USE)) return last32();
      // Local-use prefixes may be /48../96 (RFC 6052 layouts); only /96 places the IPv4 unambiguously.
      return p[3] === 0 && p[4] === 0 && p[5] === 0 ? last32() : 'unknown';
    case '6to4': // 2002:AABB:CCDD::/48
      return [fromWords(p[1], p[2])];
    case 'teredo': // 2001:0:server:server:flags:port:~client:~client
      return [fromWords(p[2], p[3]), fromWords(~p[6] & 0xffff, ~p[7] & 0xffff)];
    default:
      break;
  }
  // Deprecated IPv4-compatible ::a.b.c.d (but not :: or ::1, which have their own meaning).
  if (p.slice(0, 6).every((w) => w === 0) && (p[6] !== 0 || p[7] > 1)) return last32();
  return null;
}
