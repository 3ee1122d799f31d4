/**
 * A PostgreSQL cluster of a suite's own (initdb in a temporary folder, a free port, trust
 * auth on loopback), for suites that stop or restart PostgreSQL: the shared one on 5432 is
 * never touched. `destroy()` stops it and removes its folder, also after a failure.
 */
import { execFile } from 'node:child_process';
import { chownSync, mkdtempSync, readdirSync, rmSync, statSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { freePort } from '../../scripts/temporal-server';

const run = promisify(execFile);

export class PgCluster {
  private constructor(
    private readonly bin: string,
    private readonly dir: string,
    readonly port: number,
    private readonly asUser: string | null,
  ) {}

  static async create(): Promise<PgCluster> {
    const versions = readdirSync('/usr/lib/postgresql').filter((v) => /^\d+$/.test(v)).sort((a, b) => Number(a) - Number(b));
    const version = versions.at(-1);
    if (!version) throw new Error('no PostgreSQL server binaries under /usr/lib/postgresql');
    const dir = mkdtempSync(path.join(os.tmpdir(), 'publishing-pg-'));
    // PostgreSQL refuses to run as root: the cluster then belongs to the postgres user.
    const asUser = process.getuid?.() === 0 ? 'postgres' : null;
    if (asUser) {
      const { uid, gid } = statSync('/var/lib/postgresql');
      chownSync(dir, uid, gid);
    }
    const cluster = new PgCluster(`/usr/lib/postgresql/${version}/bin`, dir, await freePort(), asUser);
    try {
      await cluster.tool('initdb', ['-D', `${dir}/data`, '-U', 'postgres', '--auth=trust', '-E', 'UTF8', '--no-sync']);
      await cluster.start();
    } catch (error) {
      rmSync(dir, { recursive: true, force: true });
      throw error;
    }
    return cluster;
  }

  /** The superuser, `postgres`, on database `database`. */
  url(database = 'postgres', role = 'postgres'): string {
    return `postgres://${role}@127.0.0.1:${this.port}/${database}`;
  }

  async start(): Promise<void> {
    const options = `-p ${this.port} -c listen_addresses=127.0.0.1 -c unix_socket_directories=${this.dir} -c fsync=off -c max_connections=300`;
    await this.tool('pg_ctl', ['-D', `${this.dir}/data`, '-o', options, '-l', `${this.dir}/server.log`, '-w', 'start']);
  }

  async stop(): Promise<void> {
    await this.tool('pg_ctl', ['-D', `${this.dir}/data`, '-m', 'fast', '-w', 'stop']);
  }

  async destroy(): Promise<void> {
    await this.stop().catch(() => undefined);
    rmSync(this.dir, { recursive: true, force: true });
  }

  private async tool(name: string, args: string[]): Promise<void> {
    const command = path.join(this.bin, name);
    if (this.asUser) await run('runuser', ['-u', this.asUser, '--', command, ...args]);
    else await run(command, args);
  }
}
