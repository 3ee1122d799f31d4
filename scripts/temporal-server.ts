/**
 * Temporal's development server (the `temporal` CLI, which contains the server and the
 * Temporal UI), built from its Go module, pinned, into `.tools/`, and run on ports of our
 * choosing with a SQLite file, so a restart keeps its workflows.
 *
 * Used by jest's global setup (the live suites), `npm run start:temporal`, the fault
 * injection and the benchmarks. As a command:
 *
 *   tsx scripts/temporal-server.ts build    builds the binary if it is missing; prints its path
 *   tsx scripts/temporal-server.ts start    runs a server in the foreground until SIGINT/SIGTERM
 *
 * No registry ships a Temporal server for these machines, and the SDK's own `createLocal()`
 * downloads one at run time; the Go module proxy does ship the CLI's source. v1.5.1 is the
 * newest tag whose go.mod has no `replace` directive, which `go install module@version`
 * refuses.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, openSync, renameSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { Connection, type ConnectionOptions } from '@temporalio/client';

export const TEMPORAL_CLI_MODULE = 'github.com/temporalio/cli/cmd/temporal';
export const TEMPORAL_CLI_VERSION = 'v1.5.1';

/** The search attributes the delivery workflows carry (src/delivery/temporal-engine.ts), registered at start. */
export const DELIVERY_SEARCH_ATTRIBUTE_NAMES = ['OrganizationId', 'EndpointId', 'EventId', 'DeliveryOutcome', 'DeliveryAttempts'] as const;

/** Their types, as `temporal operator search-attribute create --type` and `start-dev --search-attribute` name them: Keyword unless said. */
export function deliverySearchAttributeType(name: (typeof DELIVERY_SEARCH_ATTRIBUTE_NAMES)[number]): 'Keyword' | 'Int' {
  return name === 'DeliveryAttempts' ? 'Int' : 'Keyword';
}

const root = path.resolve(__dirname, '..');

/** Where the pinned binary lives; the version is in the path, so a pin change rebuilds. */
export function temporalBinaryPath(): string {
  return path.join(root, '.tools', `temporal-cli-${TEMPORAL_CLI_VERSION}`, 'temporal');
}

export function goBinary(purpose = "the project's Go-built servers (.tools/)"): string {
  const onPath = spawnSync('sh', ['-c', 'command -v go'], { encoding: 'utf8' }).stdout.trim();
  if (onPath) return onPath;
  if (existsSync('/usr/local/go/bin/go')) return '/usr/local/go/bin/go';
  throw new Error(`Go is needed to build ${purpose}; none was found on PATH or in /usr/local/go`);
}

/**
 * The binary, built with `go install` when missing. The first build takes minutes on two
 * cores; Go's module and build caches make later ones (a fresh clone) take seconds.
 */
export function ensureTemporalBinary(log: (line: string) => void = (line) => process.stderr.write(`${line}\n`)): string {
  const binary = temporalBinaryPath();
  if (!existsSync(binary)) installGoPackages(path.dirname(binary), [`${TEMPORAL_CLI_MODULE}@${TEMPORAL_CLI_VERSION}`], log);
  return binary;
}

/**
 * `go install`s the packages (pinned `module/pkg@version`) into `dir`, statically linked.
 * Built into a directory of its own and renamed, so a build that stops halfway leaves nothing.
 */
export function installGoPackages(dir: string, packages: string[], log: (line: string) => void): void {
  const go = goBinary(packages.join(' '));
  const staging = `${dir}.build-${process.pid}`;
  rmSync(staging, { recursive: true, force: true });
  mkdirSync(staging, { recursive: true });
  log(`temporal: building ${packages.join(' ')} into .tools/ (minutes the first time)`);
  const started = Date.now();
  const built = spawnSync(go, ['install', ...packages], {
    env: { ...process.env, GOBIN: staging, CGO_ENABLED: '0' },
    stdio: ['ignore', 'inherit', 'inherit'],
  });
  if (built.status !== 0) {
    rmSync(staging, { recursive: true, force: true });
    throw new Error(`go install ${packages.join(' ')} failed (exit ${built.status ?? built.signal})`);
  }
  rmSync(dir, { recursive: true, force: true });
  renameSync(staging, dir);
  log(`temporal: built in ${Math.round((Date.now() - started) / 1000)} s`);
}

/** A free TCP port on loopback (a race with another process binding it is possible but harmless: the start fails loudly). */
export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}

/**
 * A shell that runs `"$@"` and stops it when our end of its stdin closes (we stopped it, or we
 * died): `cat` returns then. (A background job's stdin is /dev/null unless redirected, hence fd 3.)
 * Spawn it detached, with stdin a pipe; stopChild ends it.
 */
export const WATCHDOG = 'exec 3<&0; trap \'kill -TERM "$child" 2>/dev/null\' TERM; "$@" & child=$!; (cat <&3 >/dev/null; kill -TERM "$child" 2>/dev/null) & wait "$child"; status=$?; wait "$child" 2>/dev/null; exit $status';

export interface DevServerOptions {
  /** SQLite file; the server's workflows survive a restart on the same file. Default: in memory. */
  dbFile?: string;
  /** Frontend gRPC port (default: a free one). */
  port?: number;
  /** Temporal UI port (default: a free one); `false` runs without the UI. */
  uiPort?: number | false;
  /** Where the server's own log goes (default: discarded). */
  logFile?: string;
  namespace?: string;
  /** Dynamic configuration besides TEMPORAL_DYNAMIC_CONFIG (values as JSON), e.g. for a benchmark's variant. */
  dynamicConfig?: readonly (readonly [string, string])[];
  /**
   * SQLite pragmas of a file-backed server (`--sqlite-pragma`). Default:
   * DEV_SERVER_SQLITE_PRAGMAS; `[]` is the CLI's own (a rollback journal, synced in full).
   */
  sqlitePragmas?: readonly string[];
}

export interface DevServer {
  /** host:port of the frontend, for TEMPORAL_ADDRESS. */
  address: string;
  port: number;
  /** http://host:port of the Temporal UI, or null without it. */
  uiUrl: string | null;
  uiPort: number | null;
  namespace: string;
  options: DevServerOptions;
  pid: number;
  /** Stops the server (SIGTERM, then SIGKILL after a grace) and waits for it to exit. */
  stop(): Promise<void>;
  /** Ends the server at once, as a crash would (SIGKILL). */
  kill(): Promise<void>;
}

/**
 * A file-backed development server's database journals ahead (WAL) and syncs at checkpoints
 * only: each of the server's writes is one append instead of a rollback journal's two fsyncs;
 * a delivery's publish → receiver p50 went from 65–73 to 39–45 ms (bench/README.md, "The
 * development server's SQLite journal"). A killed server loses nothing; a power loss can lose
 * its last transactions.
 */
export const DEV_SERVER_SQLITE_PRAGMAS: readonly string[] = ['journal_mode=wal', 'synchronous=normal'];

/** Dynamic configuration every Temporal server the project runs is given (values as JSON). */
export const TEMPORAL_DYNAMIC_CONFIG: readonly (readonly [string, string])[] = [
  ['matching.enableFairness', 'true'],
  // A worker that completes a workflow task gets the activity it scheduled in the answer when it
  // has a slot free, instead of through the task queue: a delivery's attempt starts ~13 ms
  // sooner and the server does less (bench/README.md, "The cost of a delivery on Temporal").
  ['system.enableActivityEagerExecution', 'true'],
];

/**
 * Starts a development server and waits until its frontend answers health checks with the
 * namespace registered. The server runs under a small shell that also ends it when this
 * process's end of the pipe closes, so a test run that dies leaves no server behind.
 */
export async function startTemporalDevServer(options: DevServerOptions = {}): Promise<DevServer> {
  const binary = ensureTemporalBinary();
  const port = options.port ?? (await freePort());
  const uiPort = options.uiPort === false ? null : (options.uiPort ?? (await freePort()));
  const namespace = options.namespace ?? 'default';
  const args = [
    'server',
    'start-dev',
    '--ip',
    '127.0.0.1',
    '--port',
    String(port),
    '--namespace',
    namespace,
    '--log-level',
    'warn',
    ...(options.dbFile ? ['--db-filename', options.dbFile] : []),
    ...(options.dbFile ? (options.sqlitePragmas ?? DEV_SERVER_SQLITE_PRAGMAS) : []).flatMap((pragma) => ['--sqlite-pragma', pragma]),
    ...(uiPort === null ? ['--headless'] : ['--ui-port', String(uiPort)]),
    ...DELIVERY_SEARCH_ATTRIBUTE_NAMES.flatMap((name) => ['--search-attribute', `${name}=${deliverySearchAttributeType(name)}`]),
    // Dispatch shares per fairness key (the attempt activity's key is its endpoint): one
    // endpoint's backlog does not queue another's attempts behind it.
    ...[...TEMPORAL_DYNAMIC_CONFIG, ...(options.dynamicConfig ?? [])].flatMap(([key, value]) => ['--dynamic-config-value', `${key}=${value}`]),
  ];
  const { child, exited } = spawnWatched('temporal-dev-server', binary, args, options.logFile);
  const address = `127.0.0.1:${port}`;
  try {
    await untilHealthy({ address }, namespace, child, exited);
  } catch (error) {
    await stopChild(child, exited, 'SIGKILL');
    throw error;
  }
  return {
    address,
    port,
    uiUrl: uiPort === null ? null : `http://127.0.0.1:${uiPort}`,
    uiPort,
    namespace,
    options: { ...options, port, uiPort: uiPort ?? false },
    pid: child.pid!,
    stop: () => stopChild(child, exited, 'SIGTERM'),
    kill: () => stopChild(child, exited, 'SIGKILL'),
  };
}

/**
 * Runs `binary` as its own process group under a small shell that also ends it when this
 * process's end of the pipe closes, so a test run that dies leaves no server behind.
 */
export function spawnWatched(name: string, binary: string, args: string[], logFile?: string): { child: ChildProcess; exited: Promise<number | null> } {
  const log = logFile ? openSync(logFile, 'a') : 'ignore';
  // `cat` returns when our end of stdin closes (we stopped it, or we died): then the server is told to stop.
  // (A background job's stdin is /dev/null unless redirected, hence fd 3.)
  const child = spawn('sh', ['-c', WATCHDOG, name, binary, ...args], { stdio: ['pipe', log, log], detached: true });
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  return { child, exited };
}

/** Waits until the frontend answers with the namespace registered (60 s at most), or the server exits. */
export async function untilHealthy(connect: ConnectionOptions & { address: string }, namespace: string, child: ChildProcess, exited: Promise<number | null>): Promise<void> {
  const { address } = connect;
  let gone: number | null | undefined;
  void exited.then((code) => (gone = code));
  const deadline = Date.now() + 60_000;
  let lastError: unknown;
  while (Date.now() < deadline) {
    if (gone !== undefined) throw new Error(`the Temporal server exited (code ${gone}) before it answered on ${address}`);
    try {
      const connection = await Connection.connect({ ...connect, connectTimeout: 1_000 });
      try {
        await connection.workflowService.describeNamespace({ namespace });
        return;
      } finally {
        await connection.close();
      }
    } catch (error) {
      lastError = error;
    }
    await sleep(200);
  }
  child.kill('SIGKILL');
  throw new Error(`the Temporal server did not answer on ${address} within 60 s: ${String(lastError)}`);
}

/** Stops a process `spawnWatched` started (SIGTERM, SIGKILL after 15 s; or SIGKILL at once) and waits for it to exit. */
export async function stopChild(child: ChildProcess, exited: Promise<number | null>, signal: 'SIGTERM' | 'SIGKILL'): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const group = -child.pid!;
  try {
    if (signal === 'SIGKILL') process.kill(group, 'SIGKILL');
    else child.stdin?.end();
  } catch {
    // Already gone.
  }
  const grace = setTimeout(() => {
    try {
      process.kill(group, 'SIGKILL');
    } catch {
      // Already gone.
    }
  }, 15_000);
  await exited;
  clearTimeout(grace);
}

async function main(command: string | undefined): Promise<void> {
  if (command === 'build') {
    process.stdout.write(`${ensureTemporalBinary()}\n`);
    return;
  }
  if (command === 'start') {
    const dir = path.join(root, '.data');
    mkdirSync(dir, { recursive: true });
    const server = await startTemporalDevServer({
      dbFile: path.join(dir, 'temporal.sqlite'),
      port: Number(process.env.TEMPORAL_PORT ?? 7233),
      uiPort: Number(process.env.TEMPORAL_UI_PORT ?? 8233),
      logFile: path.join(dir, 'temporal.log'),
    });
    process.stdout.write(`temporal: ${server.address}, UI ${server.uiUrl}\n`);
    const stop = () => void server.stop().then(() => process.exit(0));
    process.once('SIGINT', stop);
    process.once('SIGTERM', stop);
    return;
  }
  throw new Error('usage: tsx scripts/temporal-server.ts build|start');
}

if (require.main === module) {
  main(process.argv[2]).catch((error: unknown) => {
    process.stderr.write(`temporal: ${error instanceof Error ? error.message : String(error)}\n`);
    process.exit(1);
  });
}
