import { useState, type FormEvent } from 'react';
import { api, type Endpoint, type EventType } from './api';
import { loadCatalog } from './catalog';
import { asApiError, Empty, ErrorNote, SecretOnce, Show, StatusBadge, useLoad, when } from './ui';
import type { ApiError } from './api';

const PAGE_SIZE = 20;

interface EndpointPage {
  endpoints?: Endpoint[];
  nextPageToken?: string;
}

export function EndpointsPage({ can, narrowed }: { can: (capability: string) => boolean; narrowed: boolean }) {
  const [tokens, setTokens] = useState<string[]>(['']);
  const token = tokens[tokens.length - 1] ?? '';
  const [page, reload] = useLoad(() => api<EndpointPage>('GET', `/webhooks?pageSize=${PAGE_SIZE}${token ? `&pageToken=${encodeURIComponent(token)}` : ''}`), token);
  const [secret, setSecret] = useState('');
  return (
    <>
      <h1>Endpoints</h1>
      {secret && <SecretOnce secret={secret} onClose={() => setSecret('')} />}
      {can('manage_endpoints') && !narrowed && (
        <CreateEndpoint
          onCreated={(created) => {
            if (created.signingSecret) setSecret(created.signingSecret);
            setTokens(['']);
            reload();
          }}
        />
      )}
      <section aria-labelledby="endpoint-list">
        <h2 id="endpoint-list">Your endpoints</h2>
        <Show loaded={page} what="endpoints" retry={reload}>
          {(value) =>
            (value.endpoints ?? []).length === 0 ? (
              <Empty>No endpoints yet.{can('manage_endpoints') && !narrowed ? ' Add one above to start receiving events.' : ''}</Empty>
            ) : (
              <>
                <table>
                  <caption className="visually-hidden">Endpoints, oldest first</caption>
                  <thead>
                    <tr>
                      <th scope="col">URL</th>
                      <th scope="col">State</th>
                      <th scope="col">Events</th>
                      <th scope="col">Created</th>
                    </tr>
                  </thead>
                  <tbody>
                    {(value.endpoints ?? []).map((endpoint) => (
                      <tr key={endpoint.id}>
                        <td>
                          <a href={`#/endpoints/${encodeURIComponent(endpoint.id)}`}>{endpoint.url}</a>
                          {endpoint.description && <div className="muted">{endpoint.description}</div>}
                        </td>
                        <td>
                          <StatusBadge status={endpoint.state} />
                        </td>
                        <td>{(endpoint.eventNames ?? []).join(', ')}</td>
                        <td>{when(endpoint.createdAt)}</td>
                      </tr>
                    ))}
                  </tbody>
                </table>
                <Pager
                  previous={tokens.length > 1 ? () => setTokens(tokens.slice(0, -1)) : undefined}
                  next={value.nextPageToken ? () => setTokens([...tokens, value.nextPageToken!]) : undefined}
                  label="Endpoint pages"
                />
              </>
            )
          }
        </Show>
      </section>
    </>
  );
}

export function Pager({ previous, next, label }: { previous?: () => void; next?: () => void; label: string }) {
  if (!previous && !next) return null;
  return (
    <nav className="pager" aria-label={label}>
      <button type="button" onClick={previous} disabled={!previous}>
        Previous page
      </button>
      <button type="button" onClick={next} disabled={!next}>
        Next page
      </button>
    </nav>
  );
}

/** The event-type picker: the catalog's types grouped by their first word, and any other name the platform publishes. */
export function EventPicker({ selected, onChange }: { selected: string[]; onChange: (names: string[]) => void }) {
  const [catalog] = useLoad(loadCatalog, 'catalog');
  const [custom, setCustom] = useState('');
  const toggle = (name: string) => onChange(selected.includes(name) ? selected.filter((n) => n !== name) : [...selected, name]);
  return (
    <fieldset className="picker">
      <legend>Events to receive</legend>
      <Show loaded={catalog} what="event types">
        {(types: EventType[]) => {
          const groups = new Map<string, EventType[]>();
          for (const type of types) groups.set(type.name.split('.')[0]!, [...(groups.get(type.name.split('.')[0]!) ?? []), type]);
          return (
            <>
              {[...groups].map(([group, members]) => (
                <div key={group} role="group" aria-label={`${group} events`} className="picker-group">
                  <span className="picker-group-name">{group}</span>
                  {members.map((type) => (
                    <label key={type.name} className="check">
                      <input type="checkbox" checked={selected.includes(type.name)} onChange={() => toggle(type.name)} />
                      <code>{type.name}</code> <span className="muted">{type.description}</span>
                    </label>
                  ))}
                </div>
              ))}
              {selected
                .filter((name) => !types.some((t) => t.name === name))
                .map((name) => (
                  <label key={name} className="check">
                    <input type="checkbox" checked onChange={() => toggle(name)} />
                    <code>{name}</code>
                  </label>
                ))}
            </>
          );
        }}
      </Show>
      <label className="field">
        Another event name
        <input value={custom} onChange={(e) => setCustom(e.target.value)} placeholder="e.g. invoice.paid" />
      </label>
      <button
        type="button"
        onClick={() => {
          const name = custom.trim();
          if (name && !selected.includes(name)) onChange([...selected, name]);
          setCustom('');
        }}
      >
        Add event name
      </button>
    </fieldset>
  );
}

const SCHEMES = [
  { value: 'legacy', label: 'Legacy (x-service-signature)' },
  { value: 'standard', label: 'Standard Webhooks (webhook-signature)' },
  { value: 'both', label: 'Both sets of headers' },
];

/** The signature scheme's picker, on the create form and the edit form alike. */
export function SchemeField({ label, value, onChange }: { label: string; value: string; onChange: (scheme: string) => void }) {
  return (
    <label className="field">
      {label}
      <select value={value} onChange={(e) => onChange(e.target.value)}>
        {SCHEMES.map((s) => (
          <option key={s.value} value={s.value}>
            {s.label}
          </option>
        ))}
      </select>
    </label>
  );
}

function CreateEndpoint({ onCreated }: { onCreated: (created: { signingSecret?: string }) => void }) {
  const [url, setUrl] = useState('');
  const [description, setDescription] = useState('');
  const [eventNames, setEventNames] = useState<string[]>(['webhook.test']);
  const [scheme, setScheme] = useState('legacy');
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<ApiError | null>(null);
  const submit = (event: FormEvent) => {
    event.preventDefault();
    setBusy(true);
    setError(null);
    api<{ signingSecret?: string }>('POST', '/webhooks', { url, description, eventNames, signatureScheme: scheme }).then(
      (created) => {
        setBusy(false);
        setUrl('');
        setDescription('');
        onCreated(created);
      },
      (caught: unknown) => {
        setBusy(false);
        setError(asApiError(caught));
      },
    );
  };
  return (
    <section aria-labelledby="create-endpoint" className="card">
      <h2 id="create-endpoint">Add an endpoint</h2>
      <form onSubmit={submit}>
        <label className="field">
          Endpoint URL (https)
          <input type="url" required value={url} onChange={(e) => setUrl(e.target.value)} placeholder="https://example.com/webhooks" />
        </label>
        <label className="field">
          Description
          <input value={description} maxLength={500} onChange={(e) => setDescription(e.target.value)} />
        </label>
        <SchemeField label="Signature scheme" value={scheme} onChange={setScheme} />
        <EventPicker selected={eventNames} onChange={setEventNames} />
        {error && <ErrorNote error={error} />}
        <button type="submit" className="primary" disabled={busy}>
          {busy ? 'Adding…' : 'Add endpoint'}
        </button>
      </form>
    </section>
  );
}
