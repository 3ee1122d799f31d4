import { useState } from 'react';
import { api, DELIVERY_STATUSES, type Delivery } from './api';
import { Pager } from './endpoints';
import { Empty, Show, StatusBadge, useLoad, when } from './ui';

const PRESETS: { value: string; label: string; hours: number }[] = [
  { value: 'all', label: 'Any time', hours: 0 },
  { value: '5h', label: 'Last 5 hours', hours: 5 },
  { value: '24h', label: 'Last 24 hours', hours: 24 },
  { value: '7d', label: 'Last 7 days', hours: 168 },
  { value: '30d', label: 'Last 30 days', hours: 720 },
  { value: 'custom', label: 'Custom range', hours: 0 },
];

const PAGE_SIZE = 25;

interface Filters {
  status: string;
  eventType: string;
  preset: string;
  since: string;
  until: string;
}

function query(filters: Filters, token: string): string {
  const params = new URLSearchParams({ pageSize: String(PAGE_SIZE) });
  if (filters.status) params.append('status', filters.status);
  if (filters.eventType) params.set('eventType', filters.eventType);
  const preset = PRESETS.find((p) => p.value === filters.preset);
  if (preset && preset.hours > 0) params.set('since', new Date(Date.now() - preset.hours * 3_600_000).toISOString());
  if (filters.preset === 'custom') {
    if (filters.since) params.set('since', new Date(filters.since).toISOString());
    if (filters.until) params.set('until', new Date(filters.until).toISOString());
  }
  if (token) params.set('pageToken', token);
  return params.toString();
}

/** The endpoint's delivery log, newest first, filtered and paginated. */
export function DeliveryLog({ endpointId, path }: { endpointId: string; path: string }) {
  const [draft, setDraft] = useState<Filters>({ status: '', eventType: '', preset: 'all', since: '', until: '' });
  const [filters, setFilters] = useState<Filters>(draft);
  const [tokens, setTokens] = useState<string[]>(['']);
  const token = tokens[tokens.length - 1] ?? '';
  const search = query(filters, token);
  const [page, reload] = useLoad(() => api<{ deliveries?: Delivery[]; nextPageToken?: string }>('GET', `${path}/deliveries?${search}`), `${path}?${search}`);
  const set = (change: Partial<Filters>) => setDraft({ ...draft, ...change });
  return (
    <section aria-labelledby="delivery-log" className="card">
      <h2 id="delivery-log">Delivery log</h2>
      <form
        className="filters"
        aria-label="Filter deliveries"
        onSubmit={(event) => {
          event.preventDefault();
          setTokens(['']);
          setFilters(draft);
        }}
      >
        <label className="field">
          Status
          <select value={draft.status} onChange={(e) => set({ status: e.target.value })}>
            <option value="">Any status</option>
            {DELIVERY_STATUSES.map((s) => (
              <option key={s} value={s}>
                {s.replace('_', ' ')}
              </option>
            ))}
          </select>
        </label>
        <label className="field">
          Event type
          <input value={draft.eventType} onChange={(e) => set({ eventType: e.target.value.trim() })} placeholder="e.g. webhook.test" />
        </label>
        <label className="field">
          Recorded
          <select value={draft.preset} onChange={(e) => set({ preset: e.target.value })}>
            {PRESETS.map((p) => (
              <option key={p.value} value={p.value}>
                {p.label}
              </option>
            ))}
          </select>
        </label>
        {draft.preset === 'custom' && (
          <>
            <label className="field">
              From
              <input type="datetime-local" value={draft.since} onChange={(e) => set({ since: e.target.value })} />
            </label>
            <label className="field">
              Until
              <input type="datetime-local" value={draft.until} onChange={(e) => set({ until: e.target.value })} />
            </label>
          </>
        )}
        <button type="submit">Apply filters</button>
        <button type="button" onClick={reload}>
          Refresh
        </button>
      </form>
      <Show loaded={page} what="deliveries" retry={reload}>
        {(value) =>
          (value.deliveries ?? []).length === 0 ? (
            <Empty>No deliveries match.</Empty>
          ) : (
            <>
              <table>
                <caption className="visually-hidden">Deliveries, newest first</caption>
                <thead>
                  <tr>
                    <th scope="col">Event</th>
                    <th scope="col">Status</th>
                    <th scope="col">Attempts</th>
                    <th scope="col">Last answer</th>
                    <th scope="col">Recorded</th>
                  </tr>
                </thead>
                <tbody>
                  {(value.deliveries ?? []).map((d) => (
                    <tr key={d.id}>
                      <td>
                        <a href={`#/endpoints/${encodeURIComponent(endpointId)}/deliveries/${encodeURIComponent(d.id)}`}>
                          <code>{d.eventType}</code>
                        </a>
                        <div className="muted">{d.eventId}</div>
                      </td>
                      <td>
                        <StatusBadge status={d.status} />
                      </td>
                      <td>{d.attemptCount ?? 0}</td>
                      <td>{d.lastResponseStatus ? `HTTP ${d.lastResponseStatus}` : d.lastError || '—'}</td>
                      <td>{when(d.createdAt)}</td>
                    </tr>
                  ))}
                </tbody>
              </table>
              <Pager
                label="Delivery log pages"
                previous={tokens.length > 1 ? () => setTokens(tokens.slice(0, -1)) : undefined}
                next={value.nextPageToken ? () => setTokens([...tokens, value.nextPageToken!]) : undefined}
              />
            </>
          )
        }
      </Show>
    </section>
  );
}
