import { create } from '@bufbuild/protobuf';
import { timestampFromDate } from '@bufbuild/protobuf/wkt';
import type { HandlerContext, ServiceImpl } from '@connectrpc/connect';
import {
  PortalSessionSchema as PortalSessionMessageSchema,
  type CreatePortalSessionRequest,
  type PortalService,
  type RevokePortalSessionRequest,
  type RevokePortalSessionsRequest,
} from '../gen/publishing/internal/v1/portal_service_pb';
import { principalKey } from '../auth';
import { entityManagerOf, isUuid } from '../db';
import { apiError } from '../errors';
import type { Logger } from '../config';
import { DEFAULT_LIFETIME_SECONDS, type PortalSessions, type SessionView } from './sessions';

/** Where the browser exchanges a session's token for its cookie. */
export const START_PATH = '/portal/start';

/**
 * publishing.internal.v1.PortalService: the platform's backend (an internal service
 * credential) or an operator mints and revokes portal sessions. The token is answered once
 * and never logged.
 */
export class PortalServiceImpl implements ServiceImpl<typeof PortalService> {
  constructor(private readonly deps: { sessions: PortalSessions; logger: Logger }) {}

  async createPortalSession(req: CreatePortalSessionRequest, ctx: HandlerContext) {
    const { session, token } = await this.deps.sessions.mint(entityManagerOf(ctx), {
      organizationId: organizationIdOf(req.organizationId),
      lifetimeSeconds: req.lifetimeSeconds === 0 ? DEFAULT_LIFETIME_SECONDS : req.lifetimeSeconds,
      capabilities: req.capabilities,
      endpointIds: req.endpointIds,
      createdBy: minterOf(ctx),
    });
    this.deps.logger.info({ sessionId: session.id, organizationId: session.organizationId, capabilities: session.capabilities }, 'portal session minted');
    return { session: sessionMessage(session), token, startPath: `${START_PATH}?token=${token}` };
  }

  async revokePortalSession(req: RevokePortalSessionRequest, ctx: HandlerContext) {
    const session = await this.deps.sessions.revoke(entityManagerOf(ctx), organizationIdOf(req.organizationId), req.sessionId);
    this.deps.logger.info({ sessionId: session.id, organizationId: session.organizationId, by: minterOf(ctx) }, 'portal session revoked');
    return { session: sessionMessage(session) };
  }

  async revokePortalSessions(req: RevokePortalSessionsRequest, ctx: HandlerContext) {
    const organizationId = organizationIdOf(req.organizationId);
    const revoked = await this.deps.sessions.revokeAll(entityManagerOf(ctx), organizationId);
    this.deps.logger.info({ organizationId, revoked, by: minterOf(ctx) }, 'portal sessions revoked');
    return { revoked };
  }
}

function organizationIdOf(id: string): string {
  if (!isUuid(id)) throw apiError('ORGANIZATION_NOT_FOUND', `No organization ${id.slice(0, 64)}.`);
  return id;
}

/** Who minted or revoked: the internal credential's name, or the operator. */
function minterOf(ctx: HandlerContext): string {
  const principal = ctx.values.get(principalKey);
  if (principal?.kind === 'internal') return `internal:${principal.name}`;
  if (principal?.kind === 'operator') return 'operator';
  throw apiError('INTERNAL_CREDENTIAL_REQUIRED', 'An internal service credential is required.');
}

function sessionMessage(session: SessionView) {
  return create(PortalSessionMessageSchema, {
    id: session.id,
    organizationId: session.organizationId,
    capabilities: session.capabilities,
    endpointIds: session.endpointIds,
    createdAt: timestampFromDate(session.createdAt),
    expiresAt: timestampFromDate(session.expiresAt),
    revokedAt: session.revokedAt ? timestampFromDate(session.revokedAt) : undefined,
    createdBy: session.createdBy,
  });
}
