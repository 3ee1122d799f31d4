/**
 * The fan-out figure's two sides as a segment server (see child.ts), K loops each:
 * - service: EventService/PublishEvent over gRPC, a new event id per call, to an
 *   organization with `endpoints` subscribed endpoints (one call records that many deliveries);
 * - raw: one pg client per loop, `begin; insert into webhook_deliveries ... select` the same
 *   rows (the same columns, the same JSON body, the same reason) from the same endpoints; `commit`.
 */
import { randomUUID } from 'node:crypto';
import { Client } from 'pg';
import { createClient } from '@connectrpc/connect';
import { benchGrpcTransport } from './grpc-transport';
import { EventService } from '../src/gen/publishing/internal/v1/event_service_pb';
import { closedLoop, input, runMain, serveSegments } from './child';

interface Input {
  mode: 'service' | 'raw';
  baseUrl: string;
  token: string;
  databaseUrl: string;
  organizationId: string;
  eventType: string;
  /** The last error the service records on a delivery over the quota; the raw side writes it too. */
  refusal: string;
  loops: number;
  warmupSeconds: number;
}

const PAYLOAD = { postId: 'p_bench', connectionId: 'c_bench', scheduledAt: '2026-11-24T10:00:00.000Z', holdReason: 'connection_disabled' };

const RAW_INSERT = `insert into webhook_deliveries
  (id, organization_id, endpoint_id, event_id, event_type, payload, status, attempt_count, next_attempt_at, last_error, workflow_id, created_at, updated_at)
  select gen_random_uuid(), e.organization_id, e.id, $2::text, $3::text, $4::text, 'failed', 0, null, $5::text,
         'webhook-delivery/' || e.organization_id::text || '/' || e.id::text || '/' || $2::text, now(), now()
    from webhook_endpoints e where e.organization_id = $1::uuid and e.disabled_at is null and $3::text = any(e.event_names)`;

runMain(async () => {
  const spec = input<Input>();
  let once: (loop: number) => Promise<void>;
  let cleanup = async () => undefined as void;
  if (spec.mode === 'service') {
    const client = createClient(EventService, benchGrpcTransport(spec.baseUrl));
    const headers = { authorization: `Bearer ${spec.token}` };
    once = async () => {
      await client.publishEvent({ organizationId: spec.organizationId, eventId: `evt_${randomUUID()}`, eventType: spec.eventType, payload: PAYLOAD }, { headers });
    };
  } else {
    const clients = await Promise.all(
      Array.from({ length: spec.loops }, async () => {
        const c = new Client({ connectionString: spec.databaseUrl });
        await c.connect();
        return c;
      }),
    );
    once = async (loop) => {
      const c = clients[loop]!;
      const eventId = `evt_${randomUUID()}`;
      const body = JSON.stringify({ id: eventId, type: spec.eventType, createdAt: new Date().toISOString(), data: PAYLOAD });
      await c.query('begin');
      try {
        await c.query(RAW_INSERT, [spec.organizationId, eventId, spec.eventType, body, spec.refusal]);
        await c.query('commit');
      } catch (error) {
        await c.query('rollback').catch(() => undefined);
        throw error;
      }
    };
    cleanup = async () => {
      await Promise.all(clients.map((c) => c.end()));
    };
  }
  await serveSegments({
    warmup: () => closedLoop(spec.loops, spec.warmupSeconds, once),
    segment: (command) => closedLoop(spec.loops, command.seconds ?? 1, once),
    cleanup,
  });
});
