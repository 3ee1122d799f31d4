/**
 * A TCP proxy in front of PostgreSQL that a test can cut: PostgreSQL "unreachable" for the
 * code behind the proxy only, never for the machine's server or other suites.
 *
 *   const proxy = await startPgProxy(database.url);
 *   const orm = await openDatabase(databaseAt(proxy.url)); // the code under test goes through it
 *   const back = proxy.outage({ refusals: 3 });         // cut now; restored after 3 refused connections
 *   ...
 *   await back;
 *   await proxy.close();
 *
 * While cut, every open connection is destroyed and every new one is reset as soon as it is
 * accepted, so clients see what they see when the server is gone (ECONNRESET, "Connection
 * terminated"). Counting refused connections gives tests an explicit signal that the code
 * behind the proxy did try, and failed, to reach PostgreSQL.
 */
import net, { type AddressInfo, type Socket } from 'node:net';

export interface PgProxy {
  /** `target` with its host and port replaced by the proxy's. */
  url: string;
  /** Connections refused since the proxy started. */
  readonly refused: number;
  cut(): void;
  restore(): void;
  /** Cuts now and restores once `refusals` more connections were refused; resolves when restored. */
  outage(options: { refusals: number; timeoutMs?: number }): Promise<void>;
  close(): Promise<void>;
}

export async function startPgProxy(target: string): Promise<PgProxy> {
  const upstream = new URL(target);
  const open = new Set<Socket>();
  const refusalWaiters = new Set<() => void>();
  let cut = false;
  let refused = 0;

  const reset = (socket: Socket) => {
    // An RST, as from a host whose server is gone; a socket already closing is just destroyed.
    if (socket.readyState === 'open') socket.resetAndDestroy();
    else socket.destroy();
  };

  const server = net.createServer((client) => {
    client.on('error', () => client.destroy());
    if (cut) {
      refused += 1;
      reset(client);
      for (const wake of refusalWaiters) wake();
      return;
    }
    const postgres = net.connect({ host: upstream.hostname, port: Number(upstream.port || 5432) });
    postgres.on('error', () => client.destroy());
    client.on('close', () => postgres.destroy());
    postgres.on('close', () => client.destroy());
    for (const socket of [client, postgres]) {
      open.add(socket);
      socket.on('close', () => open.delete(socket));
    }
    client.pipe(postgres);
    postgres.pipe(client);
  });

  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = new URL(target);
  url.hostname = '127.0.0.1';
  url.port = String((server.address() as AddressInfo).port);

  const proxy: PgProxy = {
    url: url.toString(),
    get refused() {
      return refused;
    },
    cut() {
      cut = true;
      for (const socket of open) reset(socket);
    },
    restore() {
      cut = false;
    },
    outage({ refusals, timeoutMs = 20_000 }) {
      proxy.cut();
      const until = refused + refusals;
      return new Promise<void>((resolve, reject) => {
        const done = (error?: Error) => {
          clearTimeout(timer);
          refusalWaiters.delete(wake);
          proxy.restore();
          if (error) reject(error);
          else resolve();
        };
        const wake = () => {
          if (refused >= until) done();
        };
        const timer = setTimeout(() => done(new Error(`only ${refusals - (until - refused)} of ${refusals} connections were tried during the outage`)), timeoutMs);
        refusalWaiters.add(wake);
      });
    },
    async close() {
      cut = true;
      for (const socket of open) socket.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
  return proxy;
}
