import { ConnectionService, type Connection } from '../../src/gen/publishing/v1/connection_service_pb';
import type { TestApp } from './app';
import { client } from './clients';

/** Where the calls go: the base URL of a listening app, or the app itself (in process when it does not listen). */
export type AppTarget = string | Pick<TestApp, 'url' | 'fetch' | 'client'>;

/**
 * Approves `account` on the sandbox consent page of an attempt, as the README's browserless
 * recipe does (the redirect URL with its path changed to /sandbox/consent/approve and
 * `&account=<key>` appended), and returns the connected-account reference the sandbox hands
 * back on its redirect to the callback: the only reference this attempt can complete with.
 */
export async function approveSandboxAccount(app: AppTarget, redirectUrl: string, account: string): Promise<string> {
  const consent = new URL(redirectUrl);
  const approve = new URL(`${consent.pathname}/approve${consent.search}`, typeof app === 'string' ? app : app.url);
  approve.searchParams.set('account', account);
  const answer = typeof app === 'string' ? await fetch(approve, { redirect: 'manual' }) : await app.fetch(`${approve.pathname}${approve.search}`, { redirect: 'manual' });
  const location = answer.headers.get('location');
  if (answer.status !== 302 || !location) throw new Error(`the sandbox did not approve "${account}": ${answer.status} ${await answer.text()}`);
  return new URL(location).searchParams.get('connected_account_id') ?? '';
}

/**
 * Connects a sandbox account as a destination through the public API (start, approve in
 * the sandbox, then complete with the reference it returned), the way a customer would.
 * `account` is a key of SANDBOX_ACCOUNTS[toolkit], e.g. instagram/"bakery".
 */
export async function connectSandboxAccount(
  app: AppTarget,
  apiKey: string,
  toolkit = 'instagram',
  account = 'bakery',
): Promise<Connection> {
  const connections = typeof app === 'string' ? client(ConnectionService, app, 'connect', apiKey) : app.client(ConnectionService, apiKey);
  const { state, redirectUrl } = await connections.startConnection({ toolkit });
  const connectedAccountId = await approveSandboxAccount(app, redirectUrl, account);
  const { connection } = await connections.completeConnection({ state, connectedAccountId });
  if (!connection) throw new Error('CompleteConnection returned no connection');
  return connection;
}
