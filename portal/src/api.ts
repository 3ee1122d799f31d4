/**
 * The portal's only way to the service: the public /api/v1, authenticated by the session
 * cookie (sent by the browser, never readable here) and the session's CSRF token on every
 * call. Answers are data; nothing from them is ever rendered as HTML.
 */

export interface PortalSession {
  csrfToken: string;
  organizationId: string;
  sessionId: string;
  capabilities: string[];
  endpointIds: string[];
  theme: { name: string; logoUrl: string; primaryColor: string; backgroundColor: string; textColor: string };
}

export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

let csrfToken = '';

async function answer<T>(response: Response): Promise<T> {
  const text = await response.text();
  let body: unknown;
  try {
    body = text ? JSON.parse(text) : {};
  } catch {
    throw new ApiError(response.status, 'INTERNAL', 'The service answered something that is not JSON.');
  }
  if (!response.ok) {
    const refusal = body as { code?: string; message?: string };
    throw new ApiError(response.status, refusal.code ?? 'INTERNAL', refusal.message ?? `HTTP ${response.status}`);
  }
  return body as T;
}

/** The page's session: its CSRF token, capabilities and theme (a same-origin read). */
export async function loadSession(): Promise<PortalSession> {
  const session = await answer<PortalSession>(await fetch('/portal/session', { credentials: 'same-origin', cache: 'no-store' }));
  csrfToken = session.csrfToken;
  return session;
}

export async function api<T>(method: 'GET' | 'POST' | 'PATCH' | 'DELETE', path: string, body?: unknown): Promise<T> {
  const headers: Record<string, string> = { 'x-csrf-token': csrfToken };
  if (body !== undefined) headers['content-type'] = 'application/json';
  const response = await fetch(`/api/v1${path}`, {
    method,
    headers,
    credentials: 'same-origin',
    cache: 'no-store',
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return answer<T>(response);
}

export interface Endpoint {
  id: string;
  url: string;
  description?: string;
  eventNames?: string[];
  state: 'active' | 'paused' | 'disabled';
  signatureScheme: string;
  createdAt: string;
  pausedAt?: string;
  /** "customer" (paused through the API or this page) or "failing" (paused by the service); absent unless paused. */
  pauseReason?: string;
  /** A pause for failing: when the failures that led to it began. */
  failingSince?: string;
  secretRotation?: { startedAt: string; endsAt: string; previousSignatureScheme: string };
  recentDeliveries?: Delivery[];
}

export interface Delivery {
  id: string;
  endpointId: string;
  eventId: string;
  eventType: string;
  status: string;
  attemptCount?: number;
  nextAttemptAt?: string;
  lastError?: string;
  lastResponseStatus?: number;
  createdAt: string;
  deliveredAt?: string;
  /** "available", or "expired" (the plan's retention) or "erased" (on request): then the payload is empty. */
  payloadState?: string;
  payloadRemovedAt?: string;
}

export interface Attempt {
  series?: number;
  attempt?: number;
  sentAt?: string;
  durationMs?: string;
  responseStatus?: number;
  errorClass?: string;
  error?: string;
  responseExcerpt?: string;
}

export interface EventType {
  name: string;
  description: string;
  schema: Record<string, unknown>;
  example: Record<string, unknown>;
}

export interface Statistics {
  period: string;
  since: string;
  byStatus?: { status: string; count: number }[];
  total?: number;
  successRate?: number;
  attempts?: number;
  responseTimeP50Ms?: string;
  responseTimeP95Ms?: string;
  lastFailure?: { deliveryId: string; at: string; responseStatus?: number; error?: string };
}

export interface Recovery {
  id: string;
  state: string;
  found?: number;
  resent?: number;
  since: string;
  until: string;
  stoppedReason?: string;
}

export const DELIVERY_STATUSES = ['pending', 'retrying', 'held', 'delivered', 'dead_lettered', 'failed'] as const;
