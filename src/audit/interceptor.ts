import { ConnectError, createContextKey, type HandlerContext, type Interceptor } from '@connectrpc/connect';
import { accessOf } from '../auth/access';
import { entityManagerKey } from '../db/context';
import { principalKey } from '../auth/principal';
import { requestIdKey } from '../context';
import { errorInfoOf, ERRORS } from '../errors';
import type { Logger } from '../config/logger';
import { appendAuditEvent, type AuditOutcome } from './trail';

/** What a service adds to the audit event of the current call. */
export interface AuditNote {
  targetId: string | null;
  details: Record<string, unknown>;
}

const auditNoteKey = createContextKey<AuditNote | null>(null, { description: 'audit note' });

/** Names the target (and optional details) of the audited action of this call. */
export function noteAuditTarget(ctx: Pick<HandlerContext, 'values'>, targetId: string, details: Record<string, unknown> = {}): void {
  const note = ctx.values.get(auditNoteKey);
  if (note) {
    note.targetId = targetId;
    Object.assign(note.details, details);
  }
}

/**
 * Audits every call of an RPC whose access rule names an audit action. The handler runs
 * in a transaction with the success event, so an action is never stored without its
 * event; a refusal rolls the action back and is recorded on its own.
 */
export function createAuditInterceptor(logger: Logger): Interceptor {
  return (next) => async (req) => {
    const action = accessOf(req.method).auditAction;
    const principal = req.contextValues.get(principalKey);
    const em = req.contextValues.get(entityManagerKey);
    if (!action || principal?.kind !== 'customer' || !em) return next(req);

    const note: AuditNote = { targetId: null, details: {} };
    req.contextValues.set(auditNoteKey, note);
    const entry = (outcome: AuditOutcome, reason: string | null) => ({
      organizationId: principal.organizationId,
      actorUserId: principal.userId,
      apiKeyId: principal.apiKeyId,
      action,
      targetId: note.targetId,
      outcome,
      reason,
      requestId: req.contextValues.get(requestIdKey) || null,
      details: note.details,
    });

    try {
      return await em.transactional(async (tx) => {
        req.contextValues.set(entityManagerKey, tx);
        const res = await next(req);
        await tx.flush();
        await appendAuditEvent(tx, entry('succeeded', null));
        return res;
      });
    } catch (error) {
      const info = error instanceof ConnectError ? errorInfoOf(error) : null;
      const refused = info !== null && ERRORS[info.code][1] < 500;
      try {
        await appendAuditEvent(em.fork(), entry(refused ? 'refused' : 'failed', info?.code ?? 'INTERNAL'));
      } catch (auditError) {
        logger.error({ err: auditError, action }, 'could not append audit event');
      }
      throw error;
    } finally {
      req.contextValues.set(entityManagerKey, em);
    }
  };
}
