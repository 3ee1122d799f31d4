/**
 * `npm run operator -- portal-session <create|revoke|revoke-all>`: mints and revokes
 * customer-portal sessions through publishing.internal.v1.PortalService, with the operator
 * credential, at OPERATOR_URL, as the rest of the operator CLI. The minted link is printed
 * for the operator to hand over; the service keeps only its hash.
 *
 * Exit codes as the operator CLI's: 0 done, 1 refused or unreachable, 2 bad usage.
 */
import { timestampDate, type Timestamp } from '@bufbuild/protobuf/wkt';
import { ConnectError, createClient, type Interceptor } from '@connectrpc/connect';
import { createConnectTransport } from '@connectrpc/connect-node';
import { idOption, optionText, runCommandLine, UsageError, type CliIo, type CommandLine } from '../command-line';
import { PortalService, type PortalSession } from '../gen/publishing/internal/v1/portal_service_pb';
import { codeOf, operatorToken, operatorUrl } from './cli';

export const PORTAL_COMMAND = 'portal-session';

const USAGE = `usage: npm run operator -- portal-session <command> [options] [--json]

  create      --org ID [--hours N] [--capabilities LIST] [--endpoint ID]...
              mint a session (1 to 168 hours, default 24) and print its one-time link;
              LIST: any of secrets, manage_endpoints, resend (comma-separated; read is always granted)
  revoke      --org ID --session ID     end one session at once
  revoke-all  --org ID                  end every open session of the organization

environment: OPERATOR_URL (default http://localhost:8080), OPERATOR_TOKEN (default: the development token)
`;

const OPTIONS = {
  org: { type: 'string' },
  session: { type: 'string' },
  hours: { type: 'string' },
  capabilities: { type: 'string' },
  endpoint: { type: 'string', multiple: true },
} as const;

type PortalClient = ReturnType<typeof createClient<typeof PortalService>>;
type Output = { json: unknown; text: string };

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

/** Everything a usage mistake can be is found here, before anything is sent. */
function prepare({ positionals, values }: CommandLine<typeof OPTIONS>, url: string): (portal: PortalClient) => Promise<Output> {
  const [command, ...extra] = positionals;
  if (extra.length > 0) throw new UsageError(`unexpected argument "${extra[0]}"`);
  const organizationId = idOption(values, 'org', true);
  if (command === 'create') {
    const request = {
      organizationId,
      lifetimeSeconds: hours(optionText(values, 'hours')) * 3600,
      capabilities: (optionText(values, 'capabilities') ?? '').split(',').map((c) => c.trim()).filter(Boolean),
      endpointIds: (values.endpoint ?? []).map((e) => idOption({ endpoint: e }, 'endpoint', true)),
    };
    return async (portal) => {
      const answer = await portal.createPortalSession(request);
      const link = `${url}${answer.startPath}`;
      const expiresAt = answer.session?.expiresAt ? timestampDate(answer.session.expiresAt).toISOString() : null;
      return { json: { sessionId: answer.session?.id, expiresAt, link }, text: `${sessionText(answer.session)}\nlink (works once): ${link}\n` };
    };
  }
  if (command === 'revoke') {
    const sessionId = idOption(values, 'session', true);
    return async (portal) => {
      const answer = await portal.revokePortalSession({ organizationId, sessionId });
      return { json: { sessionId: answer.session?.id, revoked: true }, text: `${sessionText(answer.session)}\n` };
    };
  }
  if (command === 'revoke-all') {
    return async (portal) => {
      const answer = await portal.revokePortalSessions({ organizationId });
      return { json: { revoked: answer.revoked }, text: `revoked ${answer.revoked} session(s)\n` };
    };
  }
  throw new UsageError(`unknown command ${command}`);
}

/** Runs one portal-session command (argv starts after `portal-session`) and returns the exit code. */
export function portalSessionMain(argv: string[], io: CliIo): Promise<number> {
  return runCommandLine(
    {
      name: 'operator',
      usage: USAGE,
      options: OPTIONS,
      run: async (commandLine) => {
        const url = operatorUrl(io.env);
        const call = prepare(commandLine, url);
        const token = operatorToken(io.env);
        const authorize: Interceptor = (next) => async (req) => {
          req.header.set('authorization', `Bearer ${token}`);
          return next(req);
        };
        const portal = createClient(PortalService, createConnectTransport({ baseUrl: url, httpVersion: '1.1', interceptors: [authorize], defaultTimeoutMs: 30_000 }));
        const json = Boolean(commandLine.values.json);
        try {
          const output = await call(portal);
          io.stdout.write(json ? `${JSON.stringify(output.json)}\n` : output.text);
          return 0;
        } catch (caught) {
          const error = ConnectError.from(caught);
          const code = codeOf(error);
          io.stderr.write(json ? `${JSON.stringify({ code, message: error.rawMessage })}\n` : `operator: ${code}: ${error.rawMessage}\n`);
          return 1;
        }
      },
    },
    argv,
    io,
  );
}
