import { useState } from 'react';
import { api, type Statistics } from './api';
import { Empty, Show, useLoad, when } from './ui';

const PERIODS = [
  { value: '24h', label: 'Last 24 hours' },
  { value: '7d', label: 'Last 7 days' },
  { value: '30d', label: 'Last 30 days' },
];

const BAR_HEIGHT = 22;

/** The endpoint's deliveries of a period: a bar per status (an SVG with a text equivalent) and the figures. */
export function StatisticsPanel({ path }: { path: string }) {
  const [period, setPeriod] = useState('24h');
  const [stats, reload] = useLoad(() => api<Statistics>('GET', `${path}/statistics?period=${period}`), `${path}:${period}`);
  return (
    <section aria-labelledby="statistics" className="card">
      <h2 id="statistics">Statistics</h2>
      <label className="field inline">
        Period
        <select value={period} onChange={(e) => setPeriod(e.target.value)}>
          {PERIODS.map((p) => (
            <option key={p.value} value={p.value}>
              {p.label}
            </option>
          ))}
        </select>
      </label>
      <Show loaded={stats} what="statistics" retry={reload}>
        {(s) => {
          const rows = s.byStatus ?? [];
          const total = s.total ?? 0;
          if (total === 0) return <Empty>No deliveries in this period.</Empty>;
          const max = Math.max(...rows.map((r) => r.count));
          const summary = rows.map((r) => `${r.count} ${r.status.replace('_', ' ')}`).join(', ');
          return (
            <>
              <svg className="chart" role="img" aria-label={`Deliveries by status: ${summary}`} viewBox={`0 0 400 ${rows.length * (BAR_HEIGHT + 8)}`} width="100%">
                {rows.map((row, i) => {
                  const width = Math.max(2, Math.round((row.count / max) * 260));
                  const y = i * (BAR_HEIGHT + 8);
                  return (
                    <g key={row.status}>
                      <text x="0" y={y + 16} className="chart-label">
                        {row.status.replace('_', ' ')}
                      </text>
                      <rect x="110" y={y} width={width} height={BAR_HEIGHT} className={`bar bar-${row.status}`} />
                      <text x={116 + width} y={y + 16} className="chart-label">
                        {row.count}
                      </text>
                    </g>
                  );
                })}
              </svg>
              <dl className="facts">
                <dt>Deliveries</dt>
                <dd>{total}</dd>
                <dt>Success rate</dt>
                <dd>{((s.successRate ?? 0) * 100).toFixed(1)}% of finished deliveries</dd>
                <dt>Attempts</dt>
                <dd>{s.attempts ?? 0}</dd>
                <dt>Response time</dt>
                <dd>
                  p50 {s.responseTimeP50Ms ?? '0'} ms, p95 {s.responseTimeP95Ms ?? '0'} ms
                </dd>
                <dt>Last failure</dt>
                <dd>
                  {s.lastFailure ? (
                    <>
                      {when(s.lastFailure.at)}: {s.lastFailure.responseStatus ? `HTTP ${s.lastFailure.responseStatus}` : ''} {s.lastFailure.error}
                    </>
                  ) : (
                    'none'
                  )}
                </dd>
              </dl>
            </>
          );
        }}
      </Show>
    </section>
  );
}
