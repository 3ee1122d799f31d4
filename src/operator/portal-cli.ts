/**
 * `npm run operator -- portal-session <create|revoke|revoke-all>`: mints and revokes
 * customer-portal sessions through publishing.internal.v1.PortalService, with the operator
 * credential, at OPERATOR_URL (as the rest of the operator CLI). The minted link is printed
 * for the operator to hand over; the service keeps only its hash.
 *
 * Exit codes as the operator CLI's: 0 done, 1 refused or unreachable, 2 bad usage.
 */
import { parseArgs } from 'node:util';
import { timestampDate, type Timestamp } from '@bufbuild/protobuf/wkt';
import { Code, ConnectError, createClient, type Interceptor } from '@connectrpc/connect';
import { createConnectTransport } from '@connectrpc/connect-node';
import { loadConfig } from '../config';
import { isUuid } from '../db';
import { ErrorInfoSchema } from '../gen/google/rpc/error_details_pb';
import { PortalService, type PortalSession } from '../gen/publishing/internal/v1/portal_service_pb';
import type { CliIo } from '../command-line';

export const PORTAL_COMMAND = 'portal-session';

const USAGE = `usage: npm run operator -- portal-session <command> [options] [--json]

  create      --org ID [--hours N] [--capabilities LIST] [--endpoint ID]...
              mint a session (1 to 168 hours, default 24) and print its one-time link;
              LIST: any of secrets, manage_endpoints, resend (comma-separated; read is always granted)
  revoke      --org ID --session ID     end one session at once
  revoke-all  --org ID                  end every open session of the organization

environment: OPERATOR_URL (default http://localhost:8080), OPERATOR_TOKEN (default: the development token)
`;

class UsageError extends Error {}

function parse(argv: string[]) {
  return parseArgs({
    args: argv,
    allowPositionals: true,
    strict: true,
    options: {
      json: { type: 'boolean' },
      help: { type: 'boolean' },
      org: { type: 'string' },
      session: { type: 'string' },
      hours: { type: 'string' },
      capabilities: { type: 'string' },
      endpoint: { type: 'string', multiple: true },
    },
  });
}

function uuid(value: string | undefined, name: string): string {
  if (!value) throw new UsageError(`--${name} is required`);
  if (!isUuid(value)) throw new UsageError(`--${name} must be an id (uuid), got "${value}"`);
  return value.toLowerCase();
}

function hours(value: string | undefined): number {
  if (value === undefined) return 24;
  if (!/^\d+$/.test(value) || Number(value) < 1 || Number(value) > 168) throw new UsageError(`--hours must be a whole number from 1 to 168, got "${value}"`);
  return Number(value);
}

function sessionText(session: PortalSession | undefined): string {
  if (!session) throw new Error('the service answered without a session');
  const when = (t: Timestamp | undefined) => (t ? timestampDate(t).toISOString() : '-');
  return [
    `session ${session.id}  organization ${session.organizationId}`,
    `capabilities: ${session.capabilities.join(', ')}${session.endpointIds.length ? `  endpoints: ${session.endpointIds.join(', ')}` : ''}`,
    `expires: ${when(session.expiresAt)}${session.revokedAt ? `  revoked: ${when(session.revokedAt)}` : ''}`,
  ].join('\n');
}

function baseUrl(env: NodeJS.ProcessEnv): string {
  const raw = env.OPERATOR_URL || 'http://localhost:8080';
  if (!/^https?:\/\//.test(raw)) throw new UsageError(`OPERATOR_URL must be an http(s) URL, got "${raw}"`);
  return raw.replace(/\/+$/, '');
}

/** Runs one portal-session command (argv starts after `portal-session`) and returns the exit code. */
export async function portalSessionMain(argv: string[], io: CliIo): Promise<number> {
  let run: () => Promise<{ json: unknown; text: string }>;
  let json: boolean;
  try {
    const { positionals, values } = parse(argv);
    json = values.json ?? false;
    if (values.help) {
      io.stdout.write(USAGE);
      return 0;
    }
    const url = baseUrl(io.env);
    const token = io.env.OPERATOR_TOKEN || loadConfig(io.env).operatorToken;
    const authorize: Interceptor = (next) => async (req) => {
      req.header.set('authorization', `Bearer ${token}`);
      return next(req);
    };
    const portal = createClient(PortalService, createConnectTransport({ baseUrl: url, httpVersion: '1.1', interceptors: [authorize], defaultTimeoutMs: 30_000 }));
    const organizationId = uuid(values.org, 'org');
    const [command, ...extra] = positionals;
    if (extra.length > 0) throw new UsageError(`unexpected ${extra.join(' ')}`);
    if (command === 'create') {
      const request = {
        organizationId,
        lifetimeSeconds: hours(values.hours) * 3600,
        capabilities: (values.capabilities ?? '').split(',').map((c) => c.trim()).filter(Boolean),
        endpointIds: (values.endpoint ?? []).map((e) => uuid(e, 'endpoint')),
      };
      run = async () => {
        const answer = await portal.createPortalSession(request);
        const link = `${url}${answer.startPath}`;
        return { json: { sessionId: answer.session?.id, expiresAt: answer.session?.expiresAt && timestampDate(answer.session.expiresAt).toISOString(), link }, text: `${sessionText(answer.session)}\nlink (works once): ${link}\n` };
      };
    } else if (command === 'revoke') {
      const sessionId = uuid(values.session, 'session');
      run = async () => {
        const answer = await portal.revokePortalSession({ organizationId, sessionId });
        return { json: { sessionId: answer.session?.id, revoked: true }, text: `${sessionText(answer.session)}\n` };
      };
    } else if (command === 'revoke-all') {
      run = async () => {
        const answer = await portal.revokePortalSessions({ organizationId });
        return { json: { revoked: answer.revoked }, text: `revoked ${answer.revoked} session(s)\n` };
      };
    } else throw new UsageError(command ? `unknown command ${command}` : 'a command is required');
  } catch (error) {
    // parseArgs refuses unknown options with a TypeError that has a code.
    const usage = error instanceof UsageError || (error instanceof TypeError && 'code' in error);
    io.stderr.write(`operator: ${error instanceof Error ? error.message : String(error)}\n${usage ? `\n${USAGE}` : ''}`);
    return usage ? 2 : 1;
  }
  try {
    const output = await run();
    io.stdout.write(json ? `${JSON.stringify(output.json)}\n` : output.text);
    return 0;
  } catch (caught) {
    const error = ConnectError.from(caught);
    const code = error.findDetails(ErrorInfoSchema)[0]?.reason ?? (Code[error.code] ?? 'UNKNOWN').toUpperCase();
    io.stderr.write(json ? `${JSON.stringify({ code, message: error.rawMessage })}\n` : `operator: ${code}: ${error.rawMessage}\n`);
    return 1;
  }
}
