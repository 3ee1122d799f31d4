import { randomUUID } from 'node:crypto';
import { create } from '@bufbuild/protobuf';
import { timestampFromDate } from '@bufbuild/protobuf/wkt';
import type { HandlerContext, ServiceImpl } from '@connectrpc/connect';
import {
  ConnectionSchema as ConnectionMessageSchema,
  ToolkitSchema,
  type Connection as ConnectionMessage,
  type ConnectionService,
  type ConfirmConnectionRequest,
  type CompleteConnectionRequest,
  type DisableConnectionRequest,
  type ListConnectionsRequest,
  type StartConnectionRequest,
} from '../gen/publishing/v1/connection_service_pb';
import { canConfirmChangedAccount, requireCustomer, type CustomerPrincipal } from '../auth';
import { auditedTransaction, noteAuditTarget } from '../audit';
import {
  ConnectionAttemptSchema,
  ConnectionSchema,
  afterCursor,
  decodeCursor,
  entityManagerOf,
  isUniqueViolation,
  isUuid,
  LockMode,
  pageOf,
  pageSizeOf,
  type Connection,
  type EntityManager,
} from '../db';
import { apiError, type ErrorCode } from '../errors';
import type { ChangeEvents, EventPublisher } from '../events';
import { PUBLISH_REGISTRY, connectableToolkits, toolkitOf } from './registry';
import { STATE_TTL_MS, type StateSigner } from './state';
import { ProviderError, type AccountIdentity, type ConnectionProvider, type ProviderFailure } from './provider';
import { disconnectConnection, reconnectConnection, verifyConnection } from './transitions';

export interface ConnectionServiceDeps {
  provider: ConnectionProvider;
  signer: StateSigner;
  /** Where the provider returns the browser after consent (read on use). */
  callbackUrl: () => string;
  /** Records the platform's connection and post events in the transaction of their change. */
  events: Pick<EventPublisher, 'forChange'>;
  now: () => number;
}

const MAX_REASON_LENGTH = 500;

const PROVIDER_ERRORS: Record<ProviderFailure, ErrorCode> = {
  CONNECTED_ACCOUNT_NOT_FOUND: 'PROVIDER_ACCOUNT_NOT_FOUND',
  CONNECTED_ACCOUNT_INACTIVE: 'PROVIDER_ACCOUNT_INACTIVE',
  CONNECTED_ACCOUNT_MISMATCH: 'PROVIDER_ACCOUNT_MISMATCH',
  PROVIDER_REJECTED: 'PROVIDER_UNAVAILABLE',
  PROVIDER_UNAVAILABLE: 'PROVIDER_UNAVAILABLE',
};

/** The provider knows people by one id across organizations. */
function providerUserId(principal: CustomerPrincipal): string {
  return `${principal.organizationId}:${principal.userId}`;
}

export class ConnectionServiceImpl implements ServiceImpl<typeof ConnectionService> {
  constructor(private readonly deps: ConnectionServiceDeps) {}

  async listConnections(req: ListConnectionsRequest, ctx: HandlerContext) {
    const principal = requireCustomer(ctx);
    const em = entityManagerOf(ctx);
    const limit = pageSizeOf(req.pageSize);
    const cursor = decodeCursor(req.pageToken);
    const rows = await em.find(
      ConnectionSchema,
      { organizationId: principal.organizationId, ...afterCursor('createdAt', cursor, 'asc') },
      { orderBy: { createdAt: 'asc', id: 'asc' }, limit: limit + 1 },
    );
    const { page, nextPageToken } = pageOf(rows, limit, (d) => d.createdAt);
    return {
      connections: page.map(toMessage),
      registry: PUBLISH_REGISTRY.map((t) =>
        create(ToolkitSchema, { slug: t.slug, name: t.name, status: t.status, reason: t.reason, accountKinds: [...t.accountKinds] }),
      ),
      connectableToolkits: connectableToolkits(),
      nextPageToken,
    };
  }

  async startConnection(req: StartConnectionRequest, ctx: HandlerContext) {
    const principal = requireCustomer(ctx);
    const em = entityManagerOf(ctx);
    const toolkit = toolkitOf(req.toolkit);
    if (!toolkit || toolkit.status !== 'connectable') {
      throw apiError(
        'CAPABILITY_UNSUPPORTED',
        toolkit ? `${toolkit.name} cannot be connected: ${toolkit.reason}` : `"${req.toolkit.slice(0, 64)}" is not in the publish registry and cannot be connected.`,
        { metadata: { toolkit: req.toolkit.slice(0, 64), status: toolkit?.status ?? 'not_in_registry' } },
      );
    }
    let connectionId: string | null = null;
    if (req.connectionId) {
      const destination = await this.destination(em, principal, req.connectionId);
      if (destination.toolkit !== toolkit.slug) {
        throw apiError('INVALID_ARGUMENT', `Connection ${destination.id} is a ${destination.toolkit} connection, not ${toolkit.slug}.`);
      }
      connectionId = destination.id;
    }
    const expiresAt = new Date(this.deps.now() + STATE_TTL_MS);
    const attemptId = randomUUID();
    noteAuditTarget(ctx, attemptId, { toolkit: toolkit.slug, reconnect: connectionId });
    const state = this.deps.signer.sign({
      attemptId,
      organizationId: principal.organizationId,
      userId: principal.userId,
      toolkit: toolkit.slug,
      expiresAt: expiresAt.getTime(),
    });
    // The provider first, outside any transaction: a slow one holds no pool connection, and
    // a failed link leaves no attempt behind. Its state names an attempt stored only after.
    const link = await this.callProvider(() =>
      this.deps.provider.createLink({ toolkit: toolkit.slug, userId: providerUserId(principal), callbackUrl: this.deps.callbackUrl(), state }),
    );
    await auditedTransaction(ctx, em, async (tx) => {
      tx.create(ConnectionAttemptSchema, {
        id: attemptId,
        organizationId: principal.organizationId,
        userId: principal.userId,
        toolkit: toolkit.slug,
        connectionId,
        expiresAt,
      });
    });
    return { redirectUrl: link.redirectUrl, state, expiresAt: timestampFromDate(expiresAt) };
  }

  async completeConnection(req: CompleteConnectionRequest, ctx: HandlerContext) {
    const principal = requireCustomer(ctx);
    const em = entityManagerOf(ctx);
    const now = this.deps.now();
    const check = this.deps.signer.verify(req.state, principal, now);
    if (!check.ok) throw apiError(check.code, STATE_MESSAGES[check.code]);
    const { attemptId, toolkit } = check.payload;
    noteAuditTarget(ctx, attemptId, { toolkit });
    if (!req.connectedAccountId.trim()) {
      throw apiError('CONNECTED_ACCOUNT_REQUIRED', 'connectedAccountId is required: the provider hands it back on the callback.');
    }

    const attempt = await em.findOne(ConnectionAttemptSchema, { id: attemptId, organizationId: principal.organizationId, userId: principal.userId });
    if (!attempt || attempt.completedAt) throw stateAlreadyUsed();

    // The provider before the claim and outside any transaction: a slow provider holds no
    // pool connection, and a failing one leaves the attempt unclaimed, to be completed again.
    const identity = await this.callProvider(() =>
      this.deps.provider.readIdentity({ toolkit, userId: providerUserId(principal), connectedAccountId: req.connectedAccountId, state: req.state }),
    );
    const at = new Date(now);
    const events = this.deps.events.forChange();
    try {
      const { destination, heldPosts } = await auditedTransaction(ctx, em, async (tx) => {
        // The claim makes the state single-use: of completions racing past the read above, one claims it.
        const claimed = await tx.nativeUpdate(
          ConnectionAttemptSchema,
          { id: attemptId, organizationId: principal.organizationId, userId: principal.userId, completedAt: null },
          { completedAt: at },
        );
        if (claimed === 0) throw stateAlreadyUsed();
        await this.refuseIfRegisteredElsewhere(tx, principal, toolkit, identity, attempt.connectionId ?? null);
        const completed = attempt.connectionId
          ? await this.reconnect(tx, principal, attempt.connectionId, identity, req.connectedAccountId, at, events)
          : { destination: this.newDestination(tx, principal, toolkit, identity, req.connectedAccountId), heldPosts: 0 };
        noteAuditTarget(ctx, completed.destination.id, { attemptId, accountId: identity.accountId, heldPosts: completed.heldPosts });
        return completed;
      });
      await events.committed();
      return { connection: toMessage(destination), heldPosts };
    } catch (error) {
      if (isUniqueViolation(error, 'connections_account_unique')) {
        // A concurrent completion won the race; the transaction rolled back, so a fresh read says whose it is.
        await this.refuseIfRegisteredElsewhere(em.fork(), principal, toolkit, identity, attempt.connectionId ?? null);
        throw apiError('ACCOUNT_REGISTERED_ELSEWHERE', 'This account is already connected.', { cause: error });
      }
      throw error;
    }
  }

  private async reconnect(
    tx: EntityManager,
    principal: CustomerPrincipal,
    connectionId: string,
    identity: AccountIdentity,
    connectedAccountRef: string,
    at: Date,
    events: ChangeEvents,
  ): Promise<{ destination: Connection; heldPosts: number }> {
    const destination = await this.destination(tx, principal, connectionId, LockMode.PESSIMISTIC_WRITE);
    const heldPosts = await reconnectConnection(tx, destination, identity, connectedAccountRef, at, events);
    return { destination, heldPosts };
  }

  private newDestination(tx: EntityManager, principal: CustomerPrincipal, toolkit: string, identity: AccountIdentity, connectedAccountRef: string): Connection {
    return tx.create(ConnectionSchema, {
      organizationId: principal.organizationId,
      toolkit,
      status: 'connected',
      connectedAccountRef,
      accountId: identity.accountId,
      accountKind: identity.kind,
      displayName: identity.displayName,
      handle: identity.handle,
      avatarUrl: identity.avatarUrl,
      confirmedAccountId: null,
    });
  }

  async confirmConnection(req: ConfirmConnectionRequest, ctx: HandlerContext) {
    const principal = requireCustomer(ctx);
    const em = entityManagerOf(ctx);
    noteAuditTarget(ctx, req.id);
    if (req.confirmIdentity !== true) {
      throw apiError('CONFIRMATION_REQUIRED', 'Set confirmIdentity to true to confirm the connected account.');
    }
    const events = this.deps.events.forChange();
    const destination = await auditedTransaction(ctx, em, async (tx) => {
      // Locked until commit: a reconnect between this check and the write could otherwise be verified unseen.
      const found = await this.destination(tx, principal, req.id, LockMode.PESSIMISTIC_WRITE);
      if (found.status === 'disconnected') {
        throw apiError('CONNECTION_DISCONNECTED', 'This connection is disabled; reconnect it before confirming.');
      }
      // "Held" means a reconnect brought a different account, whether or not the first one
      // was ever confirmed; either way a new identity needs an owner or admin.
      const changed = found.status === 'held' || (found.confirmedAccountId !== null && found.confirmedAccountId !== found.accountId);
      if (changed && !canConfirmChangedAccount(principal.role)) {
        throw apiError('OWNER_OR_ADMIN_REQUIRED', 'The account differs from the one confirmed before; an owner or admin must confirm it.', {
          metadata: { previousAccountId: found.confirmedAccountId ?? '', accountId: found.accountId },
        });
      }
      await verifyConnection(tx, found, new Date(this.deps.now()), events);
      noteAuditTarget(ctx, found.id, { accountId: found.accountId, accountChanged: changed });
      return found;
    });
    await events.committed();
    return { connection: toMessage(destination) };
  }

  async disableConnection(req: DisableConnectionRequest, ctx: HandlerContext) {
    const principal = requireCustomer(ctx);
    const em = entityManagerOf(ctx);
    noteAuditTarget(ctx, req.id);
    const reason = req.reason.trim();
    if (!reason) throw apiError('DISABLE_REASON_REQUIRED', 'A reason is required to disable a connection.');
    if ([...reason].length > MAX_REASON_LENGTH) {
      throw apiError('DISABLE_REASON_TOO_LONG', `The reason must be at most ${MAX_REASON_LENGTH} characters.`);
    }
    const events = this.deps.events.forChange();
    const { destination, heldPosts } = await auditedTransaction(ctx, em, async (tx) => {
      const found = await this.destination(tx, principal, req.id, LockMode.PESSIMISTIC_WRITE);
      if (found.status === 'disconnected') {
        // A repeated disable changes nothing; the audit says so rather than recording a reason that was not stored.
        noteAuditTarget(ctx, found.id, { alreadyDisabled: true, reason: found.disableReason });
        return { destination: found, heldPosts: 0 };
      }
      const held = await disconnectConnection(tx, found, reason, new Date(this.deps.now()), events);
      noteAuditTarget(ctx, found.id, { reason, heldPosts: held });
      return { destination: found, heldPosts: held };
    });
    await events.committed();
    return { connection: toMessage(destination), heldPosts };
  }

  private async destination(em: EntityManager, principal: CustomerPrincipal, id: string, lockMode?: LockMode): Promise<Connection> {
    const destination = isUuid(id) ? await em.findOne(ConnectionSchema, { id, organizationId: principal.organizationId }, { lockMode }) : null;
    if (!destination) throw apiError('CONNECTION_NOT_FOUND', `No connection ${id.slice(0, 64)} in this organization.`);
    return destination;
  }

  /** The unique index is the rule; this read only picks the clearer of two refusals. */
  private async refuseIfRegisteredElsewhere(
    em: EntityManager,
    principal: CustomerPrincipal,
    toolkit: string,
    identity: AccountIdentity,
    reconnecting: string | null,
  ): Promise<void> {
    const holder = await em.findOne(ConnectionSchema, { toolkit, accountId: identity.accountId });
    if (!holder || holder.id === reconnecting) return;
    if (holder.organizationId !== principal.organizationId) {
      throw apiError('ACCOUNT_REGISTERED_ELSEWHERE', 'This account is already connected to another organization or workspace.');
    }
    throw apiError('ACCOUNT_ALREADY_CONNECTED', `This account is already connected as ${holder.id}; reconnect that connection instead.`, {
      metadata: { connectionId: holder.id },
    });
  }

  private async callProvider<T>(call: () => Promise<T>): Promise<T> {
    try {
      return await call();
    } catch (error) {
      if (error instanceof ProviderError) throw apiError(PROVIDER_ERRORS[error.failure], error.message, { cause: error });
      throw error;
    }
  }
}

function stateAlreadyUsed() {
  return apiError('STATE_ALREADY_USED', 'This connection attempt was already completed; start a new one.');
}

const STATE_MESSAGES: Record<'STATE_INVALID' | 'STATE_EXPIRED' | 'STATE_ORGANIZATION_MISMATCH' | 'STATE_USER_MISMATCH', string> = {
  STATE_INVALID: 'The connection state is not valid: it is malformed or was not signed by this service.',
  STATE_EXPIRED: 'The connection attempt is older than 15 minutes; start it again.',
  STATE_ORGANIZATION_MISMATCH: 'The connection attempt was started in another organization.',
  STATE_USER_MISMATCH: 'The connection attempt must be completed by the person who started it.',
};

function toMessage(d: Connection): ConnectionMessage {
  return create(ConnectionMessageSchema, {
    id: d.id,
    toolkit: d.toolkit,
    status: d.status,
    identity: { accountId: d.accountId, kind: d.accountKind, displayName: d.displayName, handle: d.handle, avatarUrl: d.avatarUrl },
    confirmedAccountId: d.confirmedAccountId ?? '',
    verifiedAt: d.verifiedAt ? timestampFromDate(d.verifiedAt) : undefined,
    disconnectedAt: d.disconnectedAt ? timestampFromDate(d.disconnectedAt) : undefined,
    disableReason: d.disableReason ?? '',
    createdAt: timestampFromDate(d.createdAt),
    updatedAt: timestampFromDate(d.updatedAt),
  });
}

