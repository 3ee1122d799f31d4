/**
 * The operator CLI: `npm run operator -- <command>`. A client of the operator service
 * (publishing.operator.v1.OperatorService) over Connect, at OPERATOR_URL with the
 * operator credential (OPERATOR_TOKEN, else the configuration's development default).
 * It never takes a customer API key.
 *
 * Exit codes: 0 done, 1 the service refused or could not be reached (the stable code,
 * i.e. the ErrorInfo reason, and the message go to stderr), 2 bad usage (nothing is sent).
 */
import { timestampDate, timestampFromDate, type Timestamp } from '@bufbuild/protobuf/wkt';
import { Code, ConnectError, createClient, type Client, type Interceptor } from '@connectrpc/connect';
import { createConnectTransport } from '@connectrpc/connect-node';
import { loadConfig } from '../config';
import { isUuid } from '../db';
import { idOption, optionText, requiredOption, runCommandLine, UsageError, type CliIo, type CommandLine } from '../command-line';
import { ErrorInfoSchema } from '../gen/google/rpc/error_details_pb';
import { OperatorService, SetDeliveryQuotaResponseSchema } from '../gen/publishing/operator/v1/operator_service_pb';
import { auditOutput, deadLettersOutput, deliveryOutput, eventOutput, json, killSwitchOutput, recoveryOutput, type Output, type TemporalUi } from './cli-output';

const USAGE = `usage: npm run operator -- <command> [options] [--json]

  kill-switch get  [--org ID]                 read a switch (the global one without --org)
  kill-switch on   --reason TEXT [--org ID]   stop deliveries (of one organization, or of everyone)
  kill-switch off  [--org ID]                 let held deliveries go out again
  dead-letters     [--org ID] [--endpoint ID] [--since ISO] [--until ISO] [--limit N]
  audit            [--org ID] [--action NAME] [--since ISO] [--until ISO] [--limit N]
  set-quota        --org ID --monthly N       monthly deliveries of an enterprise organization
  delivery         ID | --endpoint ID --event EVENT_ID
                                              one delivery with every attempt: what happened, and why
  event            EVENT_ID --org ID          a published event and where each of its deliveries stands
  resend           DELIVERY_ID                send a finished delivery again, as a new series of attempts
  recover          --endpoint ID --since ISO [--until ISO] [--dry-run]
                                              resend an endpoint's dead-lettered and failed deliveries of a
                                              window (at most 14 days), paced; --dry-run only counts them
  recovery         JOB_ID                     a recovery job: state, found, resent, started, finished

  Lists are newest first; --limit defaults to ${50} (at most ${10_000}). --since is inclusive,
  --until exclusive; ISO 8601 dates or times (no offset means UTC).
  --json prints proto3 JSON (lists as an array) for scripts.

environment:
  OPERATOR_URL    the service (default http://localhost:8080)
  OPERATOR_TOKEN  the operator credential (default: the development token); never a customer API key
  TEMPORAL_UI_URL the Temporal UI (e.g. http://localhost:8233): delivery then prints its workflow's link
  TEMPORAL_NAMESPACE  the deliveries' namespace in that UI (default "default")
`;

const DEFAULT_LIMIT = 50;
const MAX_LIMIT = 10_000;
/** The service's largest page. */
const MAX_PAGE_SIZE = 200;
const DEFAULT_URL = 'http://localhost:8080';
const TIMEOUT_MS = 30_000;

const OPTIONS = {
  org: { type: 'string' },
  reason: { type: 'string' },
  endpoint: { type: 'string' },
  action: { type: 'string' },
  since: { type: 'string' },
  until: { type: 'string' },
  limit: { type: 'string' },
  monthly: { type: 'string' },
  event: { type: 'string' },
  'dry-run': { type: 'boolean' },
} as const;

type Values = CommandLine<typeof OPTIONS>['values'];
type OperatorClient = Client<typeof OperatorService>;

const ISO = /^\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d{1,9})?)?(Z|[+-]\d{2}:?\d{2})?)?$/i;

function instant(values: Values, name: 'since' | 'until'): Timestamp | undefined {
  const value = optionText(values, name);
  if (value === undefined) return undefined;
  const match = ISO.exec(value);
  // A time without an offset would otherwise be read in the machine's time zone.
  const normalised = match && value.length > 10 && !match[1] ? `${value}Z` : value;
  const at = match ? new Date(normalised.replace(' ', 'T')) : new Date(NaN);
  const invalid = Number.isNaN(at.getTime());
  // Date takes 2026-02-30 for March 2nd; a day that does not exist is a typo (checked where the day is UTC's).
  const utc = !match?.[1] || match[1].toUpperCase() === 'Z';
  if (invalid || (utc && at.toISOString().slice(0, 10) !== value.slice(0, 10))) {
    throw new UsageError(`--${name} must be an ISO 8601 date or time, got "${value}"`);
  }
  return timestampFromDate(at);
}

function range(values: Values): { since?: Timestamp; until?: Timestamp } {
  const since = instant(values, 'since');
  const until = instant(values, 'until');
  if (since && until && timestampDate(since) >= timestampDate(until)) throw new UsageError('--since must be before --until');
  return { since, until };
}

function limit(values: Values): number {
  const value = optionText(values, 'limit');
  if (value === undefined) return DEFAULT_LIMIT;
  if (!/^\d+$/.test(value) || Number(value) < 1 || Number(value) > MAX_LIMIT) {
    throw new UsageError(`--limit must be a whole number from 1 to ${MAX_LIMIT}, got "${value}"`);
  }
  return Number(value);
}

function monthly(values: Values): bigint {
  const value = requiredOption(values, 'monthly');
  if (!/^\d{1,18}$/.test(value)) throw new UsageError(`--monthly must be a whole number of deliveries (0 or more), got "${value}"`);
  return BigInt(value);
}

/** Reads pages until `wanted` items or the last page. */
async function collect<T>(wanted: number, page: (pageSize: number, pageToken: string) => Promise<{ items: T[]; next: string }>): Promise<T[]> {
  const items: T[] = [];
  let token = '';
  do {
    const answer = await page(Math.min(MAX_PAGE_SIZE, wanted - items.length), token);
    items.push(...answer.items.slice(0, wanted - items.length));
    token = answer.next;
  } while (token && items.length < wanted);
  return items;
}

type OptionName = Exclude<keyof Values, 'json' | 'help'>;

interface Command {
  /** Options it takes besides --json and --help; any other is a usage mistake. */
  options: readonly OptionName[];
  /** The one positional argument it takes, if any (named for the usage message). */
  argument?: string;
  /**
   * Reads and checks every option, throwing a UsageError before anything is sent, and
   * returns the call to make.
   */
  prepare(values: Values, argument: string | undefined, env: NodeJS.ProcessEnv): (operator: OperatorClient) => Promise<Output>;
}

function killSwitchCommand(enabled: boolean): Command {
  return {
    options: ['org', 'reason'],
    prepare(values) {
      const organizationId = (idOption(values, 'org') ?? '');
      const reason = enabled ? requiredOption(values, 'reason') : (optionText(values, 'reason') ?? '');
      return async (operator) => killSwitchOutput((await operator.setKillSwitch({ organizationId, enabled, reason })).killSwitch);
    },
  };
}

/** The commands; a name of two words is a verb of a group (`kill-switch get`). */
const COMMANDS: Record<string, Command> = {
  'kill-switch get': {
    options: ['org'],
    prepare(values) {
      const organizationId = (idOption(values, 'org') ?? '');
      return async (operator) => killSwitchOutput((await operator.getKillSwitch({ organizationId })).killSwitch);
    },
  },
  'kill-switch on': killSwitchCommand(true),
  'kill-switch off': killSwitchCommand(false),
  'dead-letters': {
    options: ['org', 'endpoint', 'since', 'until', 'limit'],
    prepare(values) {
      const filter = { organizationId: (idOption(values, 'org') ?? ''), endpointId: (idOption(values, 'endpoint') ?? ''), ...range(values) };
      const wanted = limit(values);
      return async (operator) => {
        const deadLetters = await collect(wanted, async (pageSize, pageToken) => {
          const answer = await operator.listDeadLetters({ ...filter, pageSize, pageToken });
          return { items: answer.deadLetters, next: answer.nextPageToken };
        });
        return deadLettersOutput(deadLetters);
      };
    },
  },
  audit: {
    options: ['org', 'action', 'since', 'until', 'limit'],
    prepare(values) {
      const filter = { organizationId: (idOption(values, 'org') ?? ''), action: optionText(values, 'action') ?? '', ...range(values) };
      const wanted = limit(values);
      return async (operator) => {
        const events = await collect(wanted, async (pageSize, pageToken) => {
          const answer = await operator.queryAuditEvents({ ...filter, pageSize, pageToken });
          return { items: answer.events, next: answer.nextPageToken };
        });
        return auditOutput(events);
      };
    },
  },
  delivery: {
    options: ['endpoint', 'event'],
    argument: 'delivery id',
    prepare(values, argument, env) {
      const endpointId = (idOption(values, 'endpoint') ?? '');
      const eventId = optionText(values, 'event') ?? '';
      const ui = temporalUi(env);
      if (argument !== undefined) {
        if (endpointId || eventId) throw new UsageError('give a delivery id, or --endpoint with --event, not both');
        if (!isUuid(argument)) throw new UsageError(`the delivery id must be an id (uuid), got "${argument}"`);
        return async (operator) => deliveryOutput((await operator.getDelivery({ deliveryId: argument.toLowerCase() })).delivery, ui);
      }
      if (!endpointId || !eventId) throw new UsageError('delivery needs a delivery id, or --endpoint ID with --event EVENT_ID');
      return async (operator) => deliveryOutput((await operator.getDelivery({ endpointId, eventId })).delivery, ui);
    },
  },
  event: {
    options: ['org'],
    argument: 'event id',
    prepare(values, argument) {
      const organizationId = idOption(values, 'org', true);
      if (argument === undefined) throw new UsageError('event needs the event id');
      return async (operator) => eventOutput(await operator.getEvent({ organizationId, eventId: argument }));
    },
  },
  resend: {
    options: [],
    argument: 'delivery id',
    prepare(_values, argument, env) {
      if (argument === undefined || !isUuid(argument)) throw new UsageError(`resend needs a delivery id (uuid)${argument ? `, got "${argument}"` : ''}`);
      const ui = temporalUi(env);
      return async (operator) => deliveryOutput((await operator.resendDelivery({ deliveryId: argument.toLowerCase() })).delivery, ui);
    },
  },
  recover: {
    options: ['endpoint', 'since', 'until', 'dry-run'],
    prepare(values) {
      const endpointId = idOption(values, 'endpoint', true);
      const window = range(values);
      if (!window.since) throw new UsageError('--since is required: when the outage began');
      const dryRun = values['dry-run'] === true;
      return async (operator) => {
        const answer = await operator.recoverDeliveries({ endpointId, ...window, dryRun });
        if (answer.dryRun) {
          return { json: { organizationId: answer.organizationId, found: answer.found, dryRun: true }, text: `would resend ${answer.found} deliveries\n` };
        }
        return recoveryOutput(answer.recovery, answer.organizationId, { found: answer.found, replayed: answer.replayed });
      };
    },
  },
  recovery: {
    options: [],
    argument: 'job id',
    prepare(_values, argument) {
      if (argument === undefined || !isUuid(argument)) throw new UsageError(`recovery needs a job id (uuid)${argument ? `, got "${argument}"` : ''}`);
      return async (operator) => {
        const answer = await operator.getRecovery({ jobId: argument.toLowerCase() });
        return recoveryOutput(answer.recovery, answer.organizationId);
      };
    },
  },
  'set-quota': {
    options: ['org', 'monthly'],
    prepare(values) {
      const organizationId = idOption(values, 'org', true);
      const monthlyDeliveries = monthly(values);
      return async (operator) => {
        const answer = await operator.setDeliveryQuota({ organizationId, monthlyDeliveries });
        return {
          json: json(SetDeliveryQuotaResponseSchema, answer),
          text: `organization ${answer.organizationId}: ${answer.monthlyDeliveries} deliveries per calendar month (UTC)\n`,
        };
      };
    },
  },
};

function commandOf(positionals: string[]): { name: string; command: Command; argument?: string } {
  const [first, second, ...rest] = positionals;
  if (!first) throw new UsageError('a command is required');
  const verbs = Object.keys(COMMANDS)
    .filter((name) => name.startsWith(`${first} `))
    .map((name) => name.slice(first.length + 1));
  if (verbs.length > 0) {
    const choices = `${verbs.slice(0, -1).join(', ')} or ${verbs.at(-1)}`;
    if (!second) throw new UsageError(`${first} needs ${choices}`);
    if (!verbs.includes(second)) throw new UsageError(`unknown ${first} command "${second}" (${choices})`);
    if (rest.length > 0) throw new UsageError(`unexpected argument "${rest[0]}"`);
    const name = `${first} ${second}`;
    return { name, command: COMMANDS[name]! };
  }
  if (first.includes(' ') || !Object.hasOwn(COMMANDS, first)) throw new UsageError(`unknown command "${first}"`);
  const command = COMMANDS[first]!;
  const extra = command.argument ? rest[0] : second;
  if (extra !== undefined) throw new UsageError(`unexpected argument "${extra}"`);
  return { name: first, command, argument: command.argument ? second : undefined };
}

/** Everything a usage mistake can be is found here, so none of them reaches the service. */
function prepare(positionals: string[], values: Values, env: NodeJS.ProcessEnv): (operator: OperatorClient) => Promise<Output> {
  const { name, command, argument } = commandOf(positionals);
  for (const [option, value] of Object.entries(values)) {
    if (value === undefined || option === 'json' || option === 'help') continue;
    if (!command.options.includes(option as OptionName)) throw new UsageError(`${name} takes no --${option}`);
  }
  return command.prepare(values, argument, env);
}

/** The Temporal UI the deliveries' workflows are watched in, when TEMPORAL_UI_URL names one. */
function temporalUi(env: NodeJS.ProcessEnv): TemporalUi | null {
  const url = httpUrlOf(env, 'TEMPORAL_UI_URL');
  return url === null ? null : { url, namespace: env.TEMPORAL_NAMESPACE || 'default' };
}

function operatorUrl(env: NodeJS.ProcessEnv): string {
  return httpUrlOf(env, 'OPERATOR_URL') ?? DEFAULT_URL;
}

/** The http(s) URL in the environment variable `name`, without trailing slashes; null when unset. */
function httpUrlOf(env: NodeJS.ProcessEnv, name: string): string | null {
  const raw = env[name];
  if (!raw) return null;
  let protocol: string;
  try {
    protocol = new URL(raw).protocol;
  } catch {
    protocol = '';
  }
  if (protocol !== 'http:' && protocol !== 'https:') throw new UsageError(`${name} must be an http(s) URL, got "${raw}"`);
  return raw.replace(/\/+$/, '');
}

function operatorToken(env: NodeJS.ProcessEnv): string {
  // Read through the configuration so the development default stays defined in one place.
  const token = env.OPERATOR_TOKEN || loadConfig(env).operatorToken;
  if (token.startsWith('pk_live_')) {
    throw new UsageError('OPERATOR_TOKEN holds a customer API key; the operator service takes only the operator credential');
  }
  return token;
}

function operatorClient(baseUrl: string, token: string): OperatorClient {
  const authorize: Interceptor = (next) => async (req) => {
    req.header.set('authorization', `Bearer ${token}`);
    return next(req);
  };
  return createClient(
    OperatorService,
    createConnectTransport({ baseUrl, httpVersion: '1.1', interceptors: [authorize], defaultTimeoutMs: TIMEOUT_MS }),
  );
}

/** The stable code: the ErrorInfo reason the service attaches, else the Connect code (e.g. UNAVAILABLE). */
function codeOf(error: ConnectError): string {
  const reason = error.findDetails(ErrorInfoSchema)[0]?.reason;
  if (reason) return reason;
  return (Code[error.code] ?? 'UNKNOWN').replace(/([a-z])([A-Z])/g, '$1_$2').toUpperCase();
}

/** Runs one command and returns the exit code (see the top of this file). */
export function main(argv: string[], io: CliIo): Promise<number> {
  return runCommandLine({ name: 'operator', usage: USAGE, options: OPTIONS, run: ({ positionals, values }) => runCommand(positionals, values, io) }, argv, io);
}

async function runCommand(positionals: string[], values: Values, io: CliIo): Promise<number> {
  const call = prepare(positionals, values, io.env);
  const operator = operatorClient(operatorUrl(io.env), operatorToken(io.env));
  try {
    const output = await call(operator);
    io.stdout.write(values.json ? `${JSON.stringify(output.json)}\n` : output.text);
    return 0;
  } catch (caught) {
    const error = ConnectError.from(caught);
    const code = codeOf(error);
    io.stderr.write(values.json ? `${JSON.stringify({ code, message: error.rawMessage })}\n` : `operator: ${code}: ${error.rawMessage}\n`);
    return 1;
  }
}
