import type { Connection, EntityManager } from '../db';
import { holdScheduledPosts } from '../posts';
import type { AccountIdentity } from './provider';

/**
 * Every change of a destination's state, each in one place and inside the caller's one
 * transaction (the one that also holds the call's audit event), so anything that must
 * happen together with a change, in the same commit, is added here once.
 */

/** A person who manages connections confirmed the identity: the destination may receive posts. */
export async function verifyConnection(_tx: EntityManager, destination: Connection, at: Date): Promise<void> {
  destination.status = 'verified';
  destination.verifiedAt = at;
  destination.confirmedAccountId = destination.accountId;
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
): Promise<number> {
  const changed = destination.accountId !== identity.accountId;
  const wasDisconnected = destination.status === 'disconnected';
  assignIdentity(destination, identity, connectedAccountRef);
  if (wasDisconnected) {
    destination.disconnectedAt = null;
    destination.disableReason = null;
  }
  if (changed) return holdForChangedAccount(tx, destination, at);
  if (wasDisconnected) destination.status = 'connected';
  return 0;
}

/** A different account behind the same destination must be re-reviewed before anything is published. */
async function holdForChangedAccount(tx: EntityManager, destination: Connection, at: Date): Promise<number> {
  destination.status = 'held';
  destination.verifiedAt = null;
  return holdScheduledPosts(tx, destination.id, 'account_changed', at);
}

/** Disabled with a reason: no posts go out, the scheduled ones are held. Returns how many. */
export async function disconnectConnection(tx: EntityManager, destination: Connection, reason: string, at: Date): Promise<number> {
  destination.status = 'disconnected';
  destination.disconnectedAt = at;
  destination.disableReason = reason;
  return holdScheduledPosts(tx, destination.id, 'connection_disabled', at);
}

function assignIdentity(destination: Connection, identity: AccountIdentity, ref: string): void {
  destination.connectedAccountRef = ref;
  destination.accountId = identity.accountId;
  destination.accountKind = identity.kind;
  destination.displayName = identity.displayName;
  destination.handle = identity.handle;
  destination.avatarUrl = identity.avatarUrl;
}
