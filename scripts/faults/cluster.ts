/** A PostgreSQL cluster of the fault run's own, so that stopping and restarting it touches nothing else. */
import { execFileSync } from 'node:child_process';
import { chownSync, mkdtempSync, readdirSync, rmSync, statSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';

/** A PostgreSQL cluster of this run's own: created, started, restarted and removed by it. */
export class OwnCluster {
  private constructor(
    private readonly bin: string,
    private readonly dir: string,
    readonly port: number,
    private readonly asUser: string | null,
  ) {}

  static async create(): Promise<OwnCluster> {
    const versions = readdirSync('/usr/lib/postgresql').filter((v) => /^\d+$/.test(v)).sort((a, b) => Number(a) - Number(b));
    const version = versions.at(-1);
    if (!version) throw new Error('no PostgreSQL server binaries under /usr/lib/postgresql');
    const bin = `/usr/lib/postgresql/${version}/bin`;
    const dir = mkdtempSync(path.join(os.tmpdir(), 'publishing-faults-pg-'));
    // PostgreSQL refuses to run as root: the cluster then belongs to the postgres user.
    const asUser = process.getuid?.() === 0 ? 'postgres' : null;
    if (asUser) {
      const { uid, gid } = statSync('/var/lib/postgresql');
      chownSync(dir, uid, gid);
    }
    const cluster = new OwnCluster(bin, dir, await freePort(), asUser);
    cluster.run('initdb', ['-D', `${dir}/data`, '-U', 'postgres', '--auth=trust', '-E', 'UTF8', '--no-sync']);
    await cluster.start();
    return cluster;
  }

  get adminUrl(): string {
    return `postgres://postgres@127.0.0.1:${this.port}/postgres`;
  }

  async start(): Promise<void> {
    const options = `-p ${this.port} -c listen_addresses=127.0.0.1 -c unix_socket_directories=${this.dir} -c fsync=off -c max_connections=200`;
    this.run('pg_ctl', ['-D', `${this.dir}/data`, '-o', options, '-l', `${this.dir}/server.log`, '-w', 'start']);
  }

  stop(): void {
    this.run('pg_ctl', ['-D', `${this.dir}/data`, '-m', 'fast', '-w', 'stop']);
  }

  destroy(): void {
    try {
      this.stop();
    } catch {
      // Already stopped.
    }
    rmSync(this.dir, { recursive: true, force: true });
  }

  private run(tool: string, args: string[]): void {
    const command = path.join(this.bin, tool);
    if (this.asUser) execFileSync('runuser', ['-u', this.asUser, '--', command, ...args], { stdio: 'pipe' });
    else execFileSync(command, args, { stdio: 'pipe' });
  }
}

async function freePort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  const { port } = server.address() as net.AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}
