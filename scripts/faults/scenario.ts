/**
 * A fault scenario: one file under scenarios/ each, run in order by run.ts on the stage of
 * its engine. A scenario injects its fault, waits for the deliveries it made to settle and
 * checks them (checks.ts); it stops what it started.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { TestTls } from '../../test/support/tls';
import { startTemporalDevServer, type DevServer } from '../temporal-server';
import type { Engine } from './checks';
import type { OwnCluster } from './cluster';
import { startService, startWorker, type Service } from './processes';
import { PUBLISHER_TOKEN } from './traffic';

/** What every scenario works on: the run's own cluster, the services' environment and the receivers' TLS. */
export interface Stage {
  cluster: OwnCluster;
  /** The service's environment on this stage (the embedded engine's, or Temporal's). */
  env: Record<string, string>;
  tls: TestTls;
}

export interface Scenario<S extends Stage = Stage> {
  /** Its name in FAULTS_ONLY. */
  name: string;
  /** The line printed before its checks. */
  title: string;
  engine: Engine;
  run(stage: S): Promise<void>;
}

/**
 * The Temporal scenarios' stage: a development server of the run's own on a SQLite file in a
 * temporary directory (so a restart keeps its workflows), the API with TEMPORAL_ADDRESS and a
 * task queue of its own, and the delivery worker as a process of its own, shared by the
 * scenarios in turn. A scenario may replace the worker or stop and start the server.
 */
export class TemporalStage implements Stage {
  readonly cluster: OwnCluster;
  readonly tls: TestTls;
  env: Record<string, string>;
  private readonly dir = mkdtempSync(path.join(os.tmpdir(), 'publishing-faults-temporal-'));
  private server: DevServer | null = null;
  private serverOptions: DevServer['options'] | null = null;
  private api: Service | null = null;
  private deliveryWorker: Pick<Service, 'stop'> | null = null;

  /** Nothing runs yet: kill() cleans up whatever begin() got to start. */
  constructor(embedded: Stage) {
    this.cluster = embedded.cluster;
    this.tls = embedded.tls;
    this.env = embedded.env;
  }

  async begin(): Promise<void> {
    this.server = await startTemporalDevServer({ dbFile: path.join(this.dir, 'temporal.sqlite'), uiPort: false, logFile: path.join(this.dir, 'temporal.log') });
    this.serverOptions = this.server.options;
    console.log(`Temporal development server of this run on ${this.server.address}`);
    this.env = {
      ...this.env,
      TEMPORAL_ADDRESS: this.server.address,
      TEMPORAL_SEARCH_ATTRIBUTES: 'true',
      TEMPORAL_TASK_QUEUE: `faults-${process.pid}`,
      // Attempts a receiver holds for 3 s must not time out.
      DELIVERY_ATTEMPT_TIMEOUT_MS: '10000',
      DELIVERY_TEST_PENDING_SWEEP_MS: '1000',
      INTERNAL_SERVICE_TOKENS: `faults:${PUBLISHER_TOKEN}`,
    };
    this.api = await startService(this.env);
    this.deliveryWorker = await startWorker(this.env);
  }

  get service(): Service {
    return this.api!;
  }

  get worker(): Pick<Service, 'stop'> {
    return this.deliveryWorker!;
  }

  set worker(worker: Pick<Service, 'stop'>) {
    this.deliveryWorker = worker;
  }

  /** Stops the Temporal server and starts it again on the same port and SQLite file: its workflows survive. */
  async restartTemporal(): Promise<void> {
    await this.stopTemporal();
    await this.startTemporal();
  }

  async stopTemporal(): Promise<void> {
    const server = this.server!;
    this.server = null;
    await server.stop();
  }

  async startTemporal(): Promise<void> {
    this.server = await startTemporalDevServer(this.serverOptions!);
  }

  /** The worker first, so no attempt starts against an API or server that is going away. */
  async stop(): Promise<void> {
    await this.deliveryWorker?.stop();
    await this.api?.stop();
    await this.server?.stop();
    this.server = null;
  }

  /** Ends the server at once and removes its files (the run's clean-up, also after a failure). */
  async kill(): Promise<void> {
    await this.server?.kill();
    this.server = null;
    rmSync(this.dir, { recursive: true, force: true });
  }
}
