import { useState, type FormEvent } from 'react';
import { api, type ApiError, type Endpoint } from './api';
import { EventPicker, SchemeField } from './endpoints';
import { DeliveryLog } from './log';
import { RecoverPanel } from './recover';
import { StatisticsPanel } from './statistics';
import { ActionButton, asApiError, ErrorNote, SecretOnce, Show, StatusBadge, useLoad, when } from './ui';

/** One endpoint, found in the organization's list (the API has no single-endpoint read). */
async function loadEndpoint(id: string): Promise<Endpoint> {
  let token = '';
  do {
    const page = await api<{ endpoints?: Endpoint[]; nextPageToken?: string }>('GET', `/webhooks?pageSize=200${token ? `&pageToken=${encodeURIComponent(token)}` : ''}`);
    const found = (page.endpoints ?? []).find((e) => e.id === id);
    if (found) return found;
    token = page.nextPageToken ?? '';
  } while (token);
  throw Object.assign(new Error('No such endpoint in this organization.'), { status: 404, code: 'WEBHOOK_NOT_FOUND' });
}

export function EndpointPage({ id, can }: { id: string; can: (capability: string) => boolean }) {
  const [endpoint, reload] = useLoad(() => loadEndpoint(id), id);
  const [secret, setSecret] = useState('');
  const [notice, setNotice] = useState('');
  const path = `/webhooks/${encodeURIComponent(id)}`;
  return (
    <Show loaded={endpoint} what="the endpoint" retry={reload}>
      {(e) => (
        <>
          <p>
            <a href="#/">← All endpoints</a>
          </p>
          <h1>
            <span className="visually-hidden">Endpoint </span>
            {e.url}
          </h1>
          <p role="status" aria-live="polite" className="notice">
            {notice}
          </p>
          {secret && <SecretOnce secret={secret} onClose={() => setSecret('')} />}
          <dl className="facts">
            <dt>State</dt>
            <dd>
              <StatusBadge status={e.state} />
            </dd>
            {e.state === 'paused' && <PauseFacts endpoint={e} />}
            <dt>Description</dt>
            <dd>{e.description || '—'}</dd>
            <dt>Events</dt>
            <dd>{(e.eventNames ?? []).join(', ')}</dd>
            <dt>Signature scheme</dt>
            <dd>{e.signatureScheme}</dd>
            {e.secretRotation && (
              <>
                <dt>Previous secret</dt>
                <dd>
                  signs too until {when(e.secretRotation.endsAt)} ({e.secretRotation.previousSignatureScheme})
                </dd>
              </>
            )}
            <dt>Created</dt>
            <dd>{when(e.createdAt)}</dd>
          </dl>
          {e.state !== 'disabled' && (can('manage_endpoints') || can('secrets')) && (
            <section aria-labelledby="actions" className="card">
              <h2 id="actions">Actions</h2>
              <div className="actions">
                {can('manage_endpoints') && (
                  <>
                    {e.state === 'active' ? (
                      <ActionButton label="Pause" run={() => api('POST', `${path}/pause`, {})} onDone={() => (setNotice('Paused: deliveries are held until you resume.'), reload())} />
                    ) : (
                      <ActionButton label="Resume" run={() => api('POST', `${path}/resume`, {})} onDone={() => (setNotice('Resumed: held deliveries go out now.'), reload())} />
                    )}
                    <ActionButton label="Send test event" run={() => api('POST', `${path}/test`, {})} onDone={() => (setNotice('A webhook.test delivery was recorded; it appears in the log below.'), reload())} />
                  </>
                )}
                {can('secrets') && <RotateSecret path={path} onRotated={(s) => (setSecret(s), reload())} />}
                {can('manage_endpoints') && (
                  <ActionButton
                    label="Disable endpoint"
                    kind="danger"
                    confirm="Disable this endpoint? Nothing more is sent to it; its history is kept."
                    run={() => api('DELETE', path)}
                    onDone={() => (setNotice('Disabled.'), reload())}
                  />
                )}
              </div>
            </section>
          )}
          {e.state !== 'disabled' && can('manage_endpoints') && <EditEndpoint endpoint={e} path={path} onSaved={(s) => (s && setSecret(s), setNotice('Saved.'), reload())} />}
          <StatisticsPanel path={path} />
          <DeliveryLog endpointId={id} path={path} />
          {can('resend') && <RecoverPanel path={path} />}
        </>
      )}
    </Show>
  );
}

/** Why and since when the endpoint is paused: by a person, or by the service because its deliveries kept failing. */
function PauseFacts({ endpoint: e }: { endpoint: Endpoint }) {
  const failing = e.pauseReason === 'failing';
  return (
    <>
      <dt>Paused</dt>
      <dd>
        {failing
          ? `automatically, on ${when(e.pausedAt)}: its deliveries kept failing${e.failingSince ? ` since ${when(e.failingSince)}` : ''}. Deliveries are held; a test event still goes out, and one that is delivered (or Resume) lifts the pause.`
          : `on ${when(e.pausedAt)}, by your organization. Deliveries are held until you resume.`}
      </dd>
    </>
  );
}

function RotateSecret({ path, onRotated }: { path: string; onRotated: (secret: string) => void }) {
  const [hours, setHours] = useState('24');
  return (
    <span className="inline-form">
      <label>
        Overlap (hours)
        <input type="number" min={0} max={168} value={hours} onChange={(e) => setHours(e.target.value)} />
      </label>
      <ActionButton
        label="Rotate secret"
        run={() => api<{ signingSecret?: string }>('POST', `${path}/rotate-secret`, { overlapSeconds: Math.round(Number(hours) * 3600) })}
        onDone={(answer) => onRotated((answer as { signingSecret?: string }).signingSecret ?? '')}
      />
    </span>
  );
}

function EditEndpoint({ endpoint, path, onSaved }: { endpoint: Endpoint; path: string; onSaved: (secret: string) => void }) {
  const [url, setUrl] = useState(endpoint.url);
  const [description, setDescription] = useState(endpoint.description ?? '');
  const [eventNames, setEventNames] = useState<string[]>(endpoint.eventNames ?? []);
  const [scheme, setScheme] = useState(endpoint.signatureScheme);
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<ApiError | null>(null);
  const submit = (event: FormEvent) => {
    event.preventDefault();
    setBusy(true);
    setError(null);
    const body: Record<string, unknown> = { url, description, eventNames };
    if (scheme !== endpoint.signatureScheme) body.signatureScheme = scheme;
    api<{ signingSecret?: string }>('PATCH', path, body).then(
      (answer) => {
        setBusy(false);
        onSaved(answer.signingSecret ?? '');
      },
      (caught: unknown) => {
        setBusy(false);
        setError(asApiError(caught));
      },
    );
  };
  return (
    <details className="card">
      <summary>
        <h2 className="inline-heading">Edit endpoint</h2>
      </summary>
      <form onSubmit={submit}>
        <label className="field">
          Endpoint URL (https)
          <input type="url" required value={url} onChange={(e) => setUrl(e.target.value)} />
        </label>
        <label className="field">
          Description
          <input value={description} maxLength={500} onChange={(e) => setDescription(e.target.value)} />
        </label>
        <SchemeField label="Signature scheme (a change mints a new secret)" value={scheme} onChange={setScheme} />
        <EventPicker selected={eventNames} onChange={setEventNames} />
        {error && <ErrorNote error={error} />}
        <button type="submit" className="primary" disabled={busy}>
          {busy ? 'Saving…' : 'Save changes'}
        </button>
      </form>
    </details>
  );
}
