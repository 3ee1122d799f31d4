/**
 * Static checks on a webhook endpoint URL at registration. They give API clients an
 * early, clear refusal; the real SSRF boundary is the connect-time check in
 * src/outbound/client.ts, because a public name can resolve to a private address
 * later (DESIGN decision 7).
 */
import { createAddressPolicy, FORBIDDEN_REASON_TEXT, isIpLiteral, type AddressPolicy } from '../outbound';

export type EndpointUrlCheck = { ok: true; url: string } | { ok: false; code: EndpointUrlErrorCode; message: string };

export type EndpointUrlErrorCode =
  | 'WEBHOOK_URL_REQUIRED'
  | 'WEBHOOK_URL_TOO_LONG'
  | 'WEBHOOK_URL_INVALID'
  | 'WEBHOOK_URL_NOT_HTTPS'
  | 'WEBHOOK_URL_MISSING_HOST'
  | 'WEBHOOK_URL_HAS_CREDENTIALS'
  | 'WEBHOOK_URL_HAS_FRAGMENT'
  | 'WEBHOOK_URL_FORBIDDEN_ADDRESS';

/** Longest URL accepted, before and after normalisation. */
export const MAX_ENDPOINT_URL_LENGTH = 2048;

/*
 * Names that never lead to the public internet. localhost is loopback by RFC 6761, so
 * an allow-list covering 127.0.0.1 or ::1 lets it through. The metadata names and the
 * private-use suffixes (reserved or never delegated in public DNS) resolve to whatever
 * the server's network says, which no CIDR can vouch for, so they are always refused.
 */
const LOOPBACK_ADDRESSES = ['127.0.0.1', '::1'];
const METADATA_NAMES = new Set(['metadata.google.internal', 'metadata.goog']);
const PRIVATE_SUFFIXES = ['.internal', '.local', '.localdomain', '.home.arpa', '.intranet', '.lan', '.corp'];

/** Policies by allow-list: the list comes from configuration, so this holds one or two. */
const policies = new Map<string, AddressPolicy>();

function policyFor(allowCidrs: readonly string[]): AddressPolicy {
  const key = allowCidrs.join(',');
  let policy = policies.get(key);
  if (!policy) {
    policy = createAddressPolicy(allowCidrs);
    if (policies.size < 16) policies.set(key, policy);
  }
  return policy;
}

const fail = (code: EndpointUrlErrorCode, message: string): EndpointUrlCheck => ({ ok: false, code, message });

export function validateEndpointUrl(raw: unknown, options: { allowCidrs?: string[] } = {}): EndpointUrlCheck {
  if (typeof raw !== 'string' || raw.trim() === '') return fail('WEBHOOK_URL_REQUIRED', 'A webhook URL is required.');
  if (raw.length > MAX_ENDPOINT_URL_LENGTH) {
    return fail('WEBHOOK_URL_TOO_LONG', `The webhook URL must be at most ${MAX_ENDPOINT_URL_LENGTH} characters long.`);
  }
  // The URL parser silently strips or drops these; refusing them avoids storing a URL the client did not type.
  if (/[\s\u0000-\u001f\u007f]/.test(raw)) {
    return fail('WEBHOOK_URL_INVALID', 'The webhook URL must not contain spaces or control characters.');
  }

  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    return fail('WEBHOOK_URL_INVALID', 'The webhook URL is not a valid absolute URL; it must start with https://.');
  }
  if (url.protocol !== 'https:') return fail('WEBHOOK_URL_NOT_HTTPS', 'The webhook URL must use https://.');
  // The parser repairs "https:/host", "https:host" and "https:\\host"; the contract says "starts with https://".
  if (!/^https:\/\/[^/\\]/i.test(raw)) {
    return fail('WEBHOOK_URL_INVALID', 'The webhook URL must start with https:// followed by a host name.');
  }
  if (!url.hostname) return fail('WEBHOOK_URL_MISSING_HOST', 'The webhook URL must include a host name.');
  if (url.username || url.password) {
    return fail('WEBHOOK_URL_HAS_CREDENTIALS', 'The webhook URL must not contain a user name or password; use the signing secret to authenticate deliveries.');
  }
  if (raw.includes('#')) return fail('WEBHOOK_URL_HAS_FRAGMENT', 'The webhook URL must not contain a fragment (#...).');
  if (url.port === '0') return fail('WEBHOOK_URL_INVALID', 'The webhook URL has an invalid port.');
  if (url.href.length > MAX_ENDPOINT_URL_LENGTH) {
    return fail('WEBHOOK_URL_TOO_LONG', `The webhook URL must be at most ${MAX_ENDPOINT_URL_LENGTH} characters long once normalised.`);
  }

  const policy = policyFor(options.allowCidrs ?? []);
  const refusal = checkHost(url.hostname, policy);
  if (refusal) return fail('WEBHOOK_URL_FORBIDDEN_ADDRESS', refusal);
  return { ok: true, url: url.href };
}

/** Returns why the host is refused, or null. `hostname` is already WHATWG-normalised. */
function checkHost(hostname: string, policy: AddressPolicy): string | null {
  // The parser already turned decimal, octal and hex IPv4 forms into dotted quads.
  const literal = hostname.startsWith('[') ? hostname.slice(1, -1) : hostname;
  if (isIpLiteral(literal)) {
    const verdict = policy(literal);
    if (verdict.allowed) return null;
    return `The webhook URL points at ${FORBIDDEN_REASON_TEXT[verdict.reason]}, which is not publicly routable; use a public host.`;
  }

  const name = hostname.replace(/\.$/, '');
  const privateNameMessage = 'The webhook URL points at a host name that only resolves inside a private network; use a public host.';
  if (name === 'localhost' || name.endsWith('.localhost')) {
    return LOOPBACK_ADDRESSES.some((a) => policy(a).allowed) ? null : privateNameMessage;
  }
  // Single-label names ("intranet", "metadata") resolve through the server's DNS search list.
  const singleLabel = !name.includes('.');
  if (singleLabel || METADATA_NAMES.has(name) || PRIVATE_SUFFIXES.some((suffix) => name.endsWith(suffix))) {
    return privateNameMessage;
  }
  return null;
}
