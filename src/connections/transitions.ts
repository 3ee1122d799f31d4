import type { Connection, EntityManager } from '../db';
import { changeEventId, type ChangeEvents } from '../events';
import { holdScheduledPosts } from '../posts';
import type { AccountIdentity } from './provider';

/**
 * Every change of a destination's state, each in one place and inside the caller's one
 * transaction (the one that also holds the call's audit event), so anything that must
 * happen together with a change, in the same commit, is added here once.
 */

/** A person who manages connections confirmed the identity: the destination may receive posts. */
export async function verifyConnection(tx: EntityManager, destination: Connection, at: Date, events: ChangeEvents): Promise<void> {
  destination.status = 'verified';
  destination.verifiedAt = at;
  destination.confirmedAccountId = destination.accountId;
  await events.record(tx, [
    connectionEvent('connection.verified', destination, at, {
      accountId: destination.accountId,
      displayName: destination.displayName,
      handle: destination.handle,
      verifiedAt: at.toISOString(),
    }),
  ]);
}

/**
 * A reconnect brought the identity read back from the provider. It ends a disable either
 * way (the reason stays in the audit trail); a different account holds the destination
 * and its scheduled posts until it is re-reviewed. Returns how many posts it held.
 */
export async function reconnectConnection(
  tx: EntityManager,
  destination: Connection,
  identity: AccountIdentity,
  connectedAccountRef: string,
  at: Date,
  events: ChangeEvents,
): Promise<number> {
  const changed = destination.accountId !== identity.accountId;
  const previousAccountId = destination.accountId;
  const wasDisconnected = destination.status === 'disconnected';
  assignIdentity(destination, identity, connectedAccountRef);
  if (wasDisconnected) {
    destination.disconnectedAt = null;
    destination.disableReason = null;
  }
  if (changed) return holdForChangedAccount(tx, destination, previousAccountId, at, events);
  if (wasDisconnected) destination.status = 'connected';
  return 0;
}

/** A different account behind the same destination must be re-reviewed before anything is published. */
async function holdForChangedAccount(tx: EntityManager, destination: Connection, previousAccountId: string, at: Date, events: ChangeEvents): Promise<number> {
  destination.status = 'held';
  destination.verifiedAt = null;
  const heldPosts = await holdScheduledPosts(tx, destination.id, 'account_changed', at, events);
  await events.record(tx, [connectionEvent('connection.held', destination, at, { previousAccountId, accountId: destination.accountId, heldPosts })]);
  return heldPosts;
}

/** Disabled with a reason: no posts go out, the scheduled ones are held. Returns how many. */
export async function disconnectConnection(tx: EntityManager, destination: Connection, reason: string, at: Date, events: ChangeEvents): Promise<number> {
  destination.status = 'disconnected';
  destination.disconnectedAt = at;
  destination.disableReason = reason;
  const heldPosts = await holdScheduledPosts(tx, destination.id, 'connection_disabled', at, events);
  await events.record(tx, [
    connectionEvent('connection.disconnected', destination, at, {
      accountId: destination.accountId,
      reason,
      disconnectedAt: at.toISOString(),
      heldPosts,
    }),
  ]);
  return heldPosts;
}

/** A connection event of the published catalog (README, "Events"). */
function connectionEvent(type: string, destination: Connection, at: Date, data: Record<string, string | number>) {
  return {
    organizationId: destination.organizationId,
    eventId: changeEventId(type, destination.id, at),
    eventType: type,
    payload: { connectionId: destination.id, toolkit: destination.toolkit, ...data },
    occurredAt: at,
  };
}

function assignIdentity(destination: Connection, identity: AccountIdentity, ref: string): void {
  destination.connectedAccountRef = ref;
  destination.accountId = identity.accountId;
  destination.accountKind = identity.kind;
  destination.displayName = identity.displayName;
  destination.handle = identity.handle;
  destination.avatarUrl = identity.avatarUrl;
}
