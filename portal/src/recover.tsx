import { useState, type FormEvent } from 'react';
import { api, type ApiError, type Recovery } from './api';
import { asApiError, ErrorNote, useLoad, Show, when } from './ui';

interface RecoverAnswer {
  recovery?: Recovery;
  found?: number;
  dryRun?: boolean;
  replayed?: boolean;
}

/** Recover an outage: the dry run's count first, then the job, whose progress can be followed. */
export function RecoverPanel({ path }: { path: string }) {
  const [since, setSince] = useState('');
  const [until, setUntil] = useState('');
  const [counted, setCounted] = useState<{ found: number; body: Record<string, string> } | null>(null);
  const [job, setJob] = useState<Recovery | null>(null);
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<ApiError | null>(null);
  const window_ = () => ({ since: new Date(since).toISOString(), ...(until ? { until: new Date(until).toISOString() } : {}) });
  const call = (body: Record<string, unknown>, done: (answer: RecoverAnswer) => void) => {
    setBusy(true);
    setError(null);
    api<RecoverAnswer>('POST', `${path}/recover`, body).then(
      (answer) => {
        setBusy(false);
        done(answer);
      },
      (caught: unknown) => {
        setBusy(false);
        setError(asApiError(caught));
      },
    );
  };
  const dryRun = (event: FormEvent) => {
    event.preventDefault();
    const body = window_();
    call({ ...body, dryRun: true }, (answer) => setCounted({ found: answer.found ?? 0, body }));
  };
  return (
    <section aria-labelledby="recover" className="card">
      <h2 id="recover">Recover failed deliveries</h2>
      <p>Resend every dead-lettered or failed delivery recorded in a window of at most 14 days. Count them first; nothing is sent until you start.</p>
      <form onSubmit={dryRun}>
        <label className="field">
          Since
          <input type="datetime-local" required value={since} onChange={(e) => (setSince(e.target.value), setCounted(null))} />
        </label>
        <label className="field">
          Until (now when empty)
          <input type="datetime-local" value={until} onChange={(e) => (setUntil(e.target.value), setCounted(null))} />
        </label>
        <button type="submit" disabled={busy}>
          Count deliveries to resend
        </button>
      </form>
      {error && <ErrorNote error={error} />}
      <div role="status" aria-live="polite">
        {counted && (
          <p>
            <strong>{counted.found}</strong> {counted.found === 1 ? 'delivery' : 'deliveries'} would be resent.
          </p>
        )}
      </div>
      {counted && counted.found > 0 && !job && (
        <button type="button" className="primary" disabled={busy} onClick={() => call(counted.body, (answer) => setJob(answer.recovery ?? null))}>
          Resend {counted.found} {counted.found === 1 ? 'delivery' : 'deliveries'}
        </button>
      )}
      {job && <RecoveryProgress path={path} job={job} />}
    </section>
  );
}

function RecoveryProgress({ path, job }: { path: string; job: Recovery }) {
  const [loaded, reload] = useLoad(() => api<{ recovery: Recovery }>('GET', `${path}/recoveries/${encodeURIComponent(job.id)}`).then((a) => a.recovery), job.id);
  return (
    <Show loaded={loaded} what="the recovery" retry={reload}>
      {(r) => (
        <div className="recovery" role="status" aria-live="polite">
          <p>
            Recovery <code>{r.id}</code>: <strong>{r.state}</strong>, {r.resent ?? 0} of {r.found ?? 0} resent
            {r.stoppedReason ? ` (stopped: ${r.stoppedReason})` : ''}. Window {when(r.since)} – {when(r.until)}.
          </p>
          <button type="button" onClick={reload}>
            Refresh progress
          </button>
        </div>
      )}
    </Show>
  );
}
