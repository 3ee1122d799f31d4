import { patched, setCurrentDetails, upsertSearchAttributes, workflowInfo } from '@temporalio/workflow';
import { MAX_ATTEMPTS, OUTCOME_ATTRIBUTES, type DeliveryOutcome } from './policy';

type Pairs = Extract<Parameters<typeof upsertSearchAttributes>[0], unknown[]>;
const OUTCOME_KEY = { name: OUTCOME_ATTRIBUTES.outcome, type: 'KEYWORD' } as const;
const ATTEMPTS_KEY = { name: OUTCOME_ATTRIBUTES.attempts, type: 'INT' } as const;

/**
 * What the Temporal UI shows of a delivery while it runs and once it ended: the current
 * details (attempts sent, the state, the next attempt's time) and, when the API set them at
 * start, the DeliveryOutcome and DeliveryAttempts search attributes. The attempts inside the
 * attempt activity's retry policy are invisible to the workflow (the server retries the
 * activity on its own): they show as the pending activity's attempt and last failure; the
 * workflow reports what it learns, a hold, a topped-up retry and the end.
 */
export class OutcomeReport {
  private readonly tracked: boolean;

  /** Call once, at the workflow's start: the patch marks where the attribute updates begin. */
  constructor(patchId: string) {
    const set = workflowInfo().typedSearchAttributes.get(OUTCOME_KEY) !== undefined;
    // A delivery running since before this change replays without updates (its history has none).
    this.tracked = set && patched(patchId);
  }

  sending(sent: number): void {
    setCurrentDetails(`Attempts ${sent + 1} to ${MAX_ATTEMPTS} run 30 s apart under Temporal's retry policy; the pending activity shows the current one and its last failure. ${sent} sent before.`);
  }

  held(sent: number, nextMs: number): void {
    this.report('held', sent, `Held (kill switch on, or endpoint paused): ${sent} of ${MAX_ATTEMPTS} sent; looks again at ${new Date(nextMs).toISOString()} or when released.`);
  }

  retrying(sent: number, nextMs: number): void {
    this.report('retrying', sent, `${sent} of ${MAX_ATTEMPTS} sent; an execution ended without a send, next attempt at ${new Date(nextMs).toISOString()}.`);
  }

  ended(outcome: 'delivered' | 'dead_lettered' | 'failed', sent: number, reason?: string): void {
    const said = { delivered: `Delivered on attempt ${sent}.`, dead_lettered: `Dead-lettered after ${sent} attempts.`, failed: 'Failed without retry.' }[outcome];
    this.report(outcome, sent, reason ? `${said} ${reason}` : said);
  }

  private report(outcome: DeliveryOutcome, sent: number, details: string): void {
    setCurrentDetails(details);
    if (!this.tracked) return;
    const pairs: Pairs = [
      { key: OUTCOME_KEY, value: outcome },
      { key: ATTEMPTS_KEY, value: sent },
    ];
    upsertSearchAttributes(pairs);
  }
}
