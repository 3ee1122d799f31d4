import { useCallback, useEffect, useRef, useState, type ReactNode } from 'react';
import { ApiError } from './api';

/** What a load is: not yet answered, answered, or refused. */
export type Loaded<T> = { state: 'loading' } | { state: 'ready'; value: T } | { state: 'error'; error: ApiError };

export function asApiError(error: unknown): ApiError {
  return error instanceof ApiError ? error : new ApiError(0, 'NETWORK', error instanceof Error ? error.message : String(error));
}

/** Loads `load` when `key` changes; `reload` runs it again. */
export function useLoad<T>(load: () => Promise<T>, key: string): [Loaded<T>, () => void] {
  const [loaded, setLoaded] = useState<Loaded<T>>({ state: 'loading' });
  const [generation, setGeneration] = useState(0);
  const current = useRef(load);
  current.current = load;
  useEffect(() => {
    let live = true;
    setLoaded((previous) => (previous.state === 'ready' ? previous : { state: 'loading' }));
    current.current().then(
      (value) => live && setLoaded({ state: 'ready', value }),
      (error: unknown) => live && setLoaded({ state: 'error', error: asApiError(error) }),
    );
    return () => {
      live = false;
    };
  }, [key, generation]);
  return [loaded, useCallback(() => setGeneration((g) => g + 1), [])];
}

export function Loading({ what }: { what: string }) {
  return (
    <p className="muted" role="status" aria-live="polite">
      Loading {what}…
    </p>
  );
}

export function ErrorNote({ error, retry }: { error: ApiError; retry?: () => void }) {
  return (
    <div className="error" role="alert">
      <p>
        <strong>{error.code}</strong>: {error.message}
      </p>
      {retry && (
        <button type="button" onClick={retry}>
          Try again
        </button>
      )}
    </div>
  );
}

export function Empty({ children }: { children: ReactNode }) {
  return <p className="empty">{children}</p>;
}

/** Renders a load's three states; `children` only once it is ready. */
export function Show<T>({ loaded, what, retry, children }: { loaded: Loaded<T>; what: string; retry?: () => void; children: (value: T) => ReactNode }) {
  if (loaded.state === 'loading') return <Loading what={what} />;
  if (loaded.state === 'error') return <ErrorNote error={loaded.error} retry={retry} />;
  return <>{children(loaded.value)}</>;
}

export function StatusBadge({ status }: { status: string }) {
  return <span className={`badge badge-${status}`}>{status.replace('_', ' ')}</span>;
}

export function when(iso: string | undefined): string {
  if (!iso) return '—';
  return new Date(iso).toLocaleString(undefined, { dateStyle: 'medium', timeStyle: 'medium' });
}

/** A button that runs an action, disabled while it runs, reporting its outcome in a live region. */
export function ActionButton({
  label,
  run,
  onDone,
  kind = 'secondary',
  confirm,
}: {
  label: string;
  run: () => Promise<unknown>;
  onDone?: (value: unknown) => void;
  kind?: 'primary' | 'secondary' | 'danger';
  confirm?: string;
}) {
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<ApiError | null>(null);
  return (
    <span className="action">
      <button
        type="button"
        className={kind}
        disabled={busy}
        onClick={() => {
          if (confirm && !window.confirm(confirm)) return;
          setBusy(true);
          setError(null);
          run().then(
            (value) => {
              setBusy(false);
              onDone?.(value);
            },
            (caught: unknown) => {
              setBusy(false);
              setError(asApiError(caught));
            },
          );
        }}
      >
        {busy ? `${label}…` : label}
      </button>
      {error && (
        <span className="inline-error" role="alert">
          {error.code}: {error.message}
        </span>
      )}
    </span>
  );
}

/** A secret shown once, in text (never as HTML), with a note that it will not be shown again. */
export function SecretOnce({ secret, onClose }: { secret: string; onClose: () => void }) {
  const ref = useRef<HTMLDivElement>(null);
  useEffect(() => ref.current?.focus(), []);
  return (
    <div className="secret" role="region" aria-label="New signing secret" tabIndex={-1} ref={ref}>
      <p>
        <strong>Signing secret</strong> — copy it now, it is not shown again:
      </p>
      <code className="secret-value">{secret}</code>
      <button type="button" onClick={onClose}>
        I have stored it
      </button>
    </div>
  );
}
