import { ConnectionService, type Connection } from '../../src/gen/publishing/v1/connection_service_pb';
import { client } from './clients';

/**
 * Connects a sandbox account as a destination through the public API (start, then
 * complete with the sandbox's connected-account reference), the way a customer would.
 * `account` is a key of SANDBOX_ACCOUNTS[toolkit], e.g. instagram/"bakery".
 */
export async function connectSandboxAccount(
  baseUrl: string,
  apiKey: string,
  toolkit = 'instagram',
  account = 'bakery',
): Promise<Connection> {
  const connections = client(ConnectionService, baseUrl, 'connect', apiKey);
  const { state } = await connections.startConnection({ toolkit });
  const { connection } = await connections.completeConnection({ state, connectedAccountId: `sbx.${toolkit}.${account}` });
  if (!connection) throw new Error('CompleteConnection returned no connection');
  return connection;
}
