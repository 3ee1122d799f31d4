import { Code, ConnectError, type ServiceImpl } from '@connectrpc/connect';
import { type Health, HealthCheckResponse_ServingStatus as Status } from '../gen/grpc/health/v1/health_pb';
import type { MikroORM } from '../db/orm';

/** Readiness is the database answering: nothing the service does works without it. */
export async function databaseReady(orm: MikroORM): Promise<boolean> {
  try {
    await orm.em.fork().execute('select 1');
    return true;
  } catch {
    return false;
  }
}

/** The standard gRPC health service; "" and every served service name report the same status. */
export class HealthService implements ServiceImpl<typeof Health> {
  constructor(
    private readonly orm: MikroORM,
    private readonly serviceNames: readonly string[],
    private readonly watchIntervalMs = 5_000,
  ) {}

  private async status(service: string): Promise<Status> {
    if (service !== '' && !this.serviceNames.includes(service)) {
      throw new ConnectError(`unknown service ${service}`, Code.NotFound);
    }
    return (await databaseReady(this.orm)) ? Status.SERVING : Status.NOT_SERVING;
  }

  async check(req: { service: string }) {
    return { status: await this.status(req.service) };
  }

  async *watch(req: { service: string }, ctx: { signal: AbortSignal }) {
    let last: Status | undefined;
    while (!ctx.signal.aborted) {
      const status = await this.status(req.service);
      if (status !== last) yield { status };
      last = status;
      await new Promise((resolve) => setTimeout(resolve, this.watchIntervalMs).unref());
    }
  }
}
