/** Traffic of the fault run: API calls as a customer makes them, publishes as an internal service does, receivers' scripts. */
import net from 'node:net';
import type { ReceiverAction } from '../../test/support/https-receiver';

export async function api(base: string, key: string, method: string, route: string, body?: unknown): Promise<{ status: number; body: any }> {
  const res = await fetch(`${base}${route}`, {
    method,
    headers: { authorization: `Bearer ${key}`, ...(body ? { 'content-type': 'application/json' } : {}) },
    body: body ? JSON.stringify(body) : undefined,
  });
  return { status: res.status, body: await res.json().catch(() => null) };
}

/** Per-path behaviour: each endpoint gets its own path so its requests can be told apart. */
export function scripted(plan: Record<string, (n: number) => ReceiverAction>) {
  const seen = new Map<string, number>();
  return (_index: number, req: { url?: string }): ReceiverAction => {
    const key = (req.url ?? '/').split('/')[1] ?? '';
    const n = seen.get(key) ?? 0;
    seen.set(key, n + 1);
    return plan[key]?.(n) ?? { status: 200 };
  };
}

/** Each of `paths` answers `action` to its first `times` requests, then 200. */
export function firstOnEachPath(paths: string[], times: number, action: ReceiverAction) {
  return scripted(Object.fromEntries(paths.map((p) => [p, (n: number) => (n < times ? action : { status: 200 })])));
}

/** One endpoint per path of the receiver, and a test call to each: the deliveries' ids. */
export async function sendToEachPath(base: string, key: string, receiverUrl: string, paths: string[]): Promise<string[]> {
  const ids: string[] = [];
  for (const p of paths) ids.push((await createEndpointAndSend(base, key, `${receiverUrl}/${p}`)).deliveryId);
  return ids;
}

export async function createEndpointAndSend(base: string, key: string, url: string): Promise<{ endpointId: string; deliveryId: string }> {
  const created = await api(base, key, 'POST', '/api/v1/webhooks', { url });
  if (created.status !== 200) throw new Error(`create webhook: ${created.status} ${JSON.stringify(created.body)}`);
  const sent = await api(base, key, 'POST', `/api/v1/webhooks/${created.body.endpoint.id}/test`);
  if (sent.status !== 200) throw new Error(`test webhook: ${sent.status} ${JSON.stringify(sent.body)}`);
  return { endpointId: created.body.endpoint.id, deliveryId: sent.body.delivery.id };
}

/** A TCP server that answers a TLS handshake with plain text: every attempt fails at TLS. */
export async function notTls(): Promise<{ url: string; close(): Promise<void> }> {
  const sockets = new Set<net.Socket>();
  const server = net.createServer((socket) => {
    sockets.add(socket);
    socket.once('close', () => sockets.delete(socket));
    socket.end('HTTP/1.1 400 Bad Request\r\n\r\n');
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  const { port } = server.address() as net.AddressInfo;
  return {
    url: `https://127.0.0.1:${port}`,
    close: () =>
      new Promise((resolve) => {
        server.close(() => resolve());
        for (const socket of sockets) socket.destroy();
      }),
  };
}

/** The internal credential the Temporal part publishes events with. */
export const PUBLISHER_TOKEN = 'faults-publisher-token-0123456789abcdef';

/** EventService/PublishEvent over Connect's JSON protocol, as an internal service calls it. */
export async function publish(base: string, organizationId: string, eventId: string): Promise<{ status: number; deliveryIds: string[] }> {
  const res = await fetch(`${base}/publishing.internal.v1.EventService/PublishEvent`, {
    method: 'POST',
    headers: { authorization: `Bearer ${PUBLISHER_TOKEN}`, 'content-type': 'application/json' },
    body: JSON.stringify({ organizationId, eventId, eventType: 'post.held', payload: { postId: eventId } }),
  });
  const body = (await res.json().catch(() => null)) as { event?: { deliveries?: { deliveryId: string }[] } } | null;
  return { status: res.status, deliveryIds: (body?.event?.deliveries ?? []).map((d) => d.deliveryId) };
}
