import net from 'node:net';
import type { PGlite } from '@electric-sql/pglite';

/** Codes of the untyped first messages a client may send (PostgreSQL protocol 3). */
const SSL_REQUEST = 80877103;
const CANCEL_REQUEST = 80877102;
const PROTOCOL_3 = 196608;

const SYNC = 'S'.charCodeAt(0);
const QUERY = 'Q'.charCodeAt(0);
const FLUSH = 'H'.charCodeAt(0);
const TERMINATE = 'X'.charCodeAt(0);
const SYNC_MESSAGE = Buffer.from([SYNC, 0, 0, 0, 4]);

export interface EmbeddedServer {
  /** host:port it listens on. */
  address: string;
  stop(): Promise<void>;
}

/** One connection's messages up to the point where it waits for answers. */
interface Exchange {
  connection: Connection;
  messages: Buffer[];
}

interface Connection {
  socket: net.Socket;
  /** Bytes received that do not make a whole message yet. */
  buffered: Buffer;
  /** Messages of an exchange not ended yet (no Sync, Query or Flush so far). */
  pending: Buffer[];
  started: boolean;
}

/**
 * Serves one PGlite database over the PostgreSQL wire protocol to several connections.
 * PGlite is one backend, one session: whatever a connection leaves in it (the unnamed
 * statement and portal, named statements, an open transaction) every other connection
 * sees. So connections take turns by exchange, never by message: a connection's messages
 * up to its Sync (or simple Query) run together, one exchange at a time, and while an
 * exchange left a transaction open (or stopped at a Flush, waiting for more of its own)
 * only that connection runs. Without it, two pooled connections' extended queries
 * interleave: one's Bind binds the other's unnamed statement with its own parameters.
 * Named statements stay one session's: openDatabase's pool sends none here (Database.embedded).
 */
export async function servePGlite(db: PGlite, options: { host: string; maxConnections: number }): Promise<EmbeddedServer> {
  const queue: Exchange[] = [];
  /** The connection that alone may run until its transaction or exchange ends. */
  let holder: Connection | null = null;
  let running = false;
  const connections = new Set<Connection>();

  const run = async () => {
    if (running) return;
    running = true;
    try {
      for (;;) {
        if (holder?.socket.destroyed) {
          // What a closed connection left open would hold every other one: its exchange ends, its transaction rolls back.
          await db.runExclusive(async () => {
            await db.execProtocolRaw(SYNC_MESSAGE);
            if (db.isInTransaction()) await db.exec('rollback');
          });
          holder = null;
        }
        const index = holder ? queue.findIndex((e) => e.connection === holder) : 0;
        if (index < 0 || queue.length === 0) return;
        const [{ connection, messages }] = queue.splice(index, 1) as [Exchange];
        if (connection.socket.destroyed) continue;
        const answer = (data: Uint8Array) => void (connection.socket.writable && connection.socket.write(Buffer.from(data)));
        try {
          await db.runExclusive(async () => {
            for (const message of messages) await db.execProtocolRawStream(message, { onRawData: answer });
          });
        } catch {
          // PGlite failed outside the protocol (it answers SQL errors itself): the connection cannot go on.
          connection.socket.destroy();
        }
        holder = db.isInTransaction() || messages.at(-1)?.[0] === FLUSH ? connection : null;
      }
    } finally {
      running = false;
    }
  };

  const closed = (connection: Connection) => {
    connections.delete(connection);
    for (let i = queue.length - 1; i >= 0; i -= 1) if (queue[i]!.connection === connection) queue.splice(i, 1);
    void run();
  };

  const receive = (connection: Connection, chunk: Buffer) => {
    connection.buffered = Buffer.concat([connection.buffered, chunk]);
    for (;;) {
      const { buffered } = connection;
      if (!connection.started) {
        if (buffered.length < 8) return;
        const length = buffered.readInt32BE(0);
        const code = buffered.readInt32BE(4);
        if (buffered.length < length) return;
        if (code === SSL_REQUEST) {
          connection.socket.write('N');
        } else if (code === CANCEL_REQUEST) {
          // A cancel asks nothing of this session's turn-taking; it is left unanswered, as PGlite cannot cancel.
        } else if (code === PROTOCOL_3) {
          connection.started = true;
          queue.push({ connection, messages: [buffered.subarray(0, length)] });
        } else {
          connection.socket.destroy();
          return;
        }
        connection.buffered = buffered.subarray(length);
        continue;
      }
      if (buffered.length < 5) break;
      const length = 1 + buffered.readInt32BE(1);
      if (buffered.length < length) break;
      const message = buffered.subarray(0, length);
      connection.buffered = buffered.subarray(length);
      const type = message[0];
      if (type === TERMINATE) {
        connection.socket.end();
        return;
      }
      connection.pending.push(message);
      if (type === SYNC || type === QUERY || type === FLUSH) {
        queue.push({ connection, messages: connection.pending });
        connection.pending = [];
      }
    }
    void run();
  };

  const server = net.createServer({ noDelay: true }, (socket) => {
    const connection: Connection = { socket, buffered: Buffer.alloc(0), pending: [], started: false };
    connections.add(connection);
    socket.on('data', (chunk: Buffer) => receive(connection, chunk));
    socket.on('error', () => socket.destroy());
    socket.once('close', () => closed(connection));
  });
  server.maxConnections = options.maxConnections;
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, options.host, () => resolve());
  });
  const { address, port } = server.address() as net.AddressInfo;
  return {
    address: `${address}:${port}`,
    async stop() {
      const stopped = new Promise<void>((resolve) => server.close(() => resolve()));
      for (const connection of connections) connection.socket.destroy();
      await stopped;
      while (running) await new Promise((resolve) => setImmediate(resolve));
    },
  };
}
