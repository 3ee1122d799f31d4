import { useState } from 'react';
import { api, type Attempt, type Delivery } from './api';
import { ActionButton, Empty, Show, StatusBadge, useLoad, when } from './ui';

interface DeliveryAnswer {
  delivery: Delivery;
  series?: number;
  attempts?: Attempt[];
  payload?: string;
}

function pretty(payload: string): string {
  try {
    return JSON.stringify(JSON.parse(payload), null, 2);
  } catch {
    return payload;
  }
}

/** One delivery with every attempt and its payload, shown as text only: a payload is never HTML here. */
export function DeliveryPage({ id, deliveryId, can }: { id: string; deliveryId: string; can: (capability: string) => boolean }) {
  const path = `/webhooks/${encodeURIComponent(id)}/deliveries/${encodeURIComponent(deliveryId)}`;
  const [loaded, reload] = useLoad(() => api<DeliveryAnswer>('GET', path), path);
  const [notice, setNotice] = useState('');
  return (
    <>
      <p>
        <a href={`#/endpoints/${encodeURIComponent(id)}`}>← Endpoint</a>
      </p>
      <Show loaded={loaded} what="the delivery" retry={reload}>
        {(d) => (
          <>
            <h1>
              Delivery of <code>{d.delivery.eventType}</code>
            </h1>
            <p role="status" aria-live="polite" className="notice">
              {notice}
            </p>
            <dl className="facts">
              <dt>Status</dt>
              <dd>
                <StatusBadge status={d.delivery.status} />
              </dd>
              <dt>Event id</dt>
              <dd>
                <code>{d.delivery.eventId}</code>
              </dd>
              <dt>Recorded</dt>
              <dd>{when(d.delivery.createdAt)}</dd>
              <dt>Delivered</dt>
              <dd>{when(d.delivery.deliveredAt)}</dd>
              <dt>Next attempt</dt>
              <dd>{when(d.delivery.nextAttemptAt)}</dd>
            </dl>
            {can('resend') && ['delivered', 'failed', 'dead_lettered'].includes(d.delivery.status) && (
              <ActionButton
                label="Resend"
                kind="primary"
                run={() => api('POST', `${path}/resend`, {})}
                onDone={() => (setNotice('Resent as a new series of attempts. The receiver may see this event twice: deliveries are at least once.'), reload())}
              />
            )}
            <section aria-labelledby="attempts">
              <h2 id="attempts">Attempts</h2>
              {(d.attempts ?? []).length === 0 ? (
                <Empty>No attempt yet.</Empty>
              ) : (
                <table>
                  <caption className="visually-hidden">Every attempt, series by series</caption>
                  <thead>
                    <tr>
                      <th scope="col">Series / attempt</th>
                      <th scope="col">Sent</th>
                      <th scope="col">Duration</th>
                      <th scope="col">Response</th>
                      <th scope="col">Error</th>
                    </tr>
                  </thead>
                  <tbody>
                    {(d.attempts ?? []).map((a) => (
                      <tr key={`${a.series ?? 1}-${a.attempt ?? 0}`}>
                        <td>
                          {a.series ?? 1} / {a.attempt ?? 0}
                        </td>
                        <td>{when(a.sentAt)}</td>
                        <td>{a.durationMs ?? '0'} ms</td>
                        <td>
                          {a.responseStatus ? `HTTP ${a.responseStatus}` : '—'}
                          {a.responseExcerpt && <pre className="excerpt">{a.responseExcerpt}</pre>}
                        </td>
                        <td>{a.error ? `${a.errorClass ?? ''} ${a.error}` : '—'}</td>
                      </tr>
                    ))}
                  </tbody>
                </table>
              )}
            </section>
            <section aria-labelledby="payload">
              <h2 id="payload">Payload</h2>
              {d.delivery.payloadState === 'expired' || d.delivery.payloadState === 'erased' ? (
                <p>
                  {d.delivery.payloadState === 'erased' ? 'Payload erased on request' : "Payload expired under the plan's retention"}
                  {d.delivery.payloadRemovedAt ? ` on ${when(d.delivery.payloadRemovedAt)}` : ''}: the delivery, its status and its attempts are kept.
                </p>
              ) : (
                <pre className="payload" tabIndex={0} aria-label="Payload as sent">
                  {pretty(d.payload ?? '')}
                </pre>
              )}
            </section>
          </>
        )}
      </Show>
    </>
  );
}
