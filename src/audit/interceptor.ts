import { ConnectError, createContextKey, type HandlerContext, type Interceptor } from '@connectrpc/connect';
import { accessOf, auditActorOf, principalKey } from '../auth';
import { entityManagerKey, type EntityManager } from '../db';
import { requestIdKey } from '../context';
import { errorInfoOf, ERRORS } from '../errors';
import type { Logger } from '../config';
import { appendAuditEvent, type AuditEntry, type AuditOutcome } from './trail';

/** The audited action of the current call: who, what, and what the service adds to it. */
interface AuditedCall {
  targetId: string | null;
  details: Record<string, unknown>;
  /** True once the success event is committed with its change. */
  recorded: boolean;
  entry(outcome: AuditOutcome, reason: string | null): AuditEntry;
}

const auditedCallKey = createContextKey<AuditedCall | null>(null, { description: 'audited call' });

/** Names the target (and optional details) of the audited action of this call. */
export function noteAuditTarget(ctx: Pick<HandlerContext, 'values'>, targetId: string, details: Record<string, unknown> = {}): void {
  const call = ctx.values.get(auditedCallKey);
  if (call) {
    call.targetId = targetId;
    Object.assign(call.details, details);
  }
}

/**
 * Runs `change` in one transaction and appends the call's success event in the same
 * transaction, so a change is never stored without its event, nor an event without its
 * change. Nothing that waits on the network belongs in `change`: it holds a pool
 * connection from its first statement to its commit.
 */
export async function auditedTransaction<T>(
  ctx: Pick<HandlerContext, 'values'>,
  em: EntityManager,
  change: (tx: EntityManager) => Promise<T>,
): Promise<T> {
  const call = ctx.values.get(auditedCallKey);
  if (!call) throw new Error('auditedTransaction outside an audited call');
  const result = await em.transactional(async (tx) => {
    const changed = await change(tx);
    await tx.flush();
    await appendAuditEvent(tx, call.entry('succeeded', null));
    return changed;
  });
  call.recorded = true;
  return result;
}

/**
 * Audits the refusals and failures of every RPC whose access rule names an audit action,
 * with a write of its own after the call: a refused change was rolled back, so there is
 * no transaction to join. Successes are recorded by the service, inside the transaction
 * of their change (auditedTransaction).
 */
export function createAuditInterceptor(logger: Logger): Interceptor {
  return (next) => async (req) => {
    const action = accessOf(req.method).auditAction;
    const principal = req.contextValues.get(principalKey);
    const em = req.contextValues.get(entityManagerKey);
    if (!action || (principal?.kind !== 'customer' && principal?.kind !== 'portal') || !em) return next(req);

    const call: AuditedCall = {
      targetId: null,
      details: {},
      recorded: false,
      entry(outcome, reason) {
        return {
          ...auditActorOf(principal),
          action,
          targetId: call.targetId,
          outcome,
          reason,
          requestId: req.contextValues.get(requestIdKey) || null,
          details: call.details,
        };
      },
    };
    req.contextValues.set(auditedCallKey, call);

    try {
      const res = await next(req);
      // An audited method that succeeds without auditedTransaction is a defect the trail would not show.
      if (!call.recorded) logger.error({ action }, 'audited action succeeded without recording its audit event');
      return res;
    } catch (error) {
      const info = error instanceof ConnectError ? errorInfoOf(error) : null;
      const refused = info !== null && ERRORS[info.code][1] < 500;
      try {
        await appendAuditEvent(em.fork(), call.entry(refused ? 'refused' : 'failed', info?.code ?? 'INTERNAL'));
      } catch (auditError) {
        logger.error({ err: auditError, action }, 'could not append audit event');
      }
      throw error;
    }
  };
}
