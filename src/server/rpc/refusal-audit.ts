import type { ConnectError, HandlerContext } from '@connectrpc/connect';
import { appendAuditEvent } from '../../audit';
import { accessOf, principalKey } from '../../auth';
import { requestIdKey } from '../../context';
import { entityManagerKey } from '../../db';
import { errorInfoOf } from '../../errors';
import type { Logger } from '../../config';

/**
 * Records the refusal of an audited RPC decided after authentication and before the body
 * reached the audit interceptor (a body that is not JSON, not protobuf, or not the
 * request's shape, on any transport): every refusal of an audited action is in the trail.
 * Goes through the audit module's only write, appendAuditEvent. Never rejects: the
 * refusal is answered whether or not its event could be stored.
 */
export function createRefusalAudit(logger: Logger): (ctx: HandlerContext, refusal: ConnectError) => Promise<void> {
  return async (ctx, refusal) => {
    const action = accessOf(ctx.method).auditAction;
    const principal = ctx.values.get(principalKey);
    const em = ctx.values.get(entityManagerKey);
    if (!action || principal?.kind !== 'customer' || !em) return;
    try {
      await appendAuditEvent(em.fork(), {
        organizationId: principal.organizationId,
        actorUserId: principal.userId,
        apiKeyId: principal.apiKeyId,
        action,
        targetId: null,
        outcome: 'refused',
        reason: errorInfoOf(refusal)?.code ?? 'INVALID_ARGUMENT',
        requestId: ctx.values.get(requestIdKey) || null,
      });
    } catch (error) {
      logger.error({ err: error, action }, 'could not append audit event');
    }
  };
}
