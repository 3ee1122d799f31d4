import { Code, ConnectError, type ServiceImpl } from '@connectrpc/connect';
import { type Health, HealthCheckResponse_ServingStatus as Status } from '../gen/grpc/health/v1/health_pb';
import type { MikroORM } from '../db';

/**
 * One dependency the service needs to serve, by the name `/readyz` reports when it is
 * down. The composition root decides the list; each dependency brings its own check.
 */
export interface ReadinessCheck {
  name: string;
  /**
   * False for a dependency the service serves without (Temporal: deliveries wait as pending
   * rows until it answers): named in `/readyz` while down, without taking the instance out.
   */
  required?: boolean;
  /** Resolves true when the dependency answers; false or a rejection means it is down. */
  probe(): Promise<boolean>;
}

/**
 * Not ready from the moment the instance begins to shut down, whatever its dependencies
 * say: /readyz answers 503 (`"down": ["shutdown"]`) and the gRPC health service NOT_SERVING
 * while the listener still accepts, so load balancers stop sending here first.
 */
export class ShutdownReadiness implements ReadinessCheck {
  readonly name = 'shutdown';
  private draining = false;

  begin(): void {
    this.draining = true;
  }

  async probe(): Promise<boolean> {
    return !this.draining;
  }
}

/** A probe that takes longer than this counts as down: a hung dependency is not ready. */
const PROBE_TIMEOUT_MS = 2_000;

/** Nothing the service does works without the database. */
export function databaseReadiness(orm: MikroORM): ReadinessCheck {
  return {
    name: 'database',
    async probe() {
      await orm.em.fork().execute('select 1');
      return true;
    },
  };
}

/** The names of the checks that are down, probed together. */
export async function downDependencies(checks: readonly ReadinessCheck[], timeoutMs = PROBE_TIMEOUT_MS): Promise<string[]> {
  const results = await Promise.all(
    checks.map(async (check) => {
      let timer: NodeJS.Timeout | undefined;
      const timedOut = new Promise<boolean>((resolve) => {
        timer = setTimeout(() => resolve(false), timeoutMs).unref();
      });
      try {
        return (await Promise.race([check.probe(), timedOut])) ? null : check.name;
      } catch {
        return check.name;
      } finally {
        clearTimeout(timer);
      }
    }),
  );
  return results.filter((name): name is string => name !== null);
}

/** True when a dependency the service cannot serve without is among the down ones. */
export function blocking(checks: readonly ReadinessCheck[], down: readonly string[]): boolean {
  return checks.some((check) => check.required !== false && down.includes(check.name));
}

/** The standard gRPC health service; "" and every served service name report the same status. */
export class HealthService implements ServiceImpl<typeof Health> {
  constructor(
    private readonly checks: readonly ReadinessCheck[],
    private readonly serviceNames: readonly string[],
    private readonly watchIntervalMs = 5_000,
  ) {}

  private async status(service: string): Promise<Status> {
    if (service !== '' && !this.serviceNames.includes(service)) {
      throw new ConnectError(`unknown service ${service}`, Code.NotFound);
    }
    return blocking(this.checks, await downDependencies(this.checks)) ? Status.NOT_SERVING : Status.SERVING;
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
