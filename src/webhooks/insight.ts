import { create } from '@bufbuild/protobuf';
import type { JsonObject } from '@bufbuild/protobuf';
import { timestampFromMs } from '@bufbuild/protobuf/wkt';
import {
  EventTypeSchema,
  GetWebhookStatisticsResponseSchema,
  ListEventTypesResponseSchema,
  LastFailureSchema,
  type GetWebhookStatisticsResponse,
  type ListEventTypesResponse,
} from '../gen/publishing/v1/webhook_service_pb';
import { endpointStatistics } from '../delivery';
import type { EntityManager } from '../db';
import { apiError } from '../errors';
import { EVENT_CATALOG } from './catalog';
import { organizationEndpoint } from '../endpoints';

/** The statistics' periods and their length. */
export const STATISTICS_PERIODS = { '24h': 86_400_000, '7d': 7 * 86_400_000, '30d': 30 * 86_400_000 } as const;

let catalogAnswer: ListEventTypesResponse | null = null;

/** ListEventTypes: the same for everyone, built once. */
export function eventTypesAnswer(): ListEventTypesResponse {
  catalogAnswer ??= create(ListEventTypesResponseSchema, {
    eventTypes: EVENT_CATALOG.map((entry) =>
      create(EventTypeSchema, {
        name: entry.name,
        description: entry.description,
        schema: entry.schema as JsonObject,
        example: entry.example as JsonObject,
      }),
    ),
  });
  return catalogAnswer;
}

const HOUR_MS = 3_600_000;

/**
 * GetWebhookStatistics: the endpoint's deliveries of the period, in one statement after the
 * endpoint's lookup. The period starts at the start of its first hour (so 24 h is 24 to 25
 * hours): the figures are kept by hour (src/delivery/statistics.ts).
 */
export async function statisticsAnswer(em: EntityManager, organizationId: string, endpointId: string, period: string, now: number): Promise<GetWebhookStatisticsResponse> {
  const name = period === '' ? '24h' : period;
  if (!Object.hasOwn(STATISTICS_PERIODS, name)) {
    throw apiError('STATISTICS_PERIOD_INVALID', `The period is one of ${Object.keys(STATISTICS_PERIODS).join(', ')}.`);
  }
  const endpoint = await organizationEndpoint(em, organizationId, endpointId);
  // From the start of the hour the period begins in: the figures are kept by hour.
  const sinceMs = Math.floor((now - STATISTICS_PERIODS[name as keyof typeof STATISTICS_PERIODS]) / HOUR_MS) * HOUR_MS;
  const stats = await endpointStatistics(em, { organizationId, endpointId: endpoint.id, since: new Date(sinceMs) });
  const count = (status: string) => stats.byStatus[status] ?? 0;
  const finished = count('delivered') + count('dead_lettered') + count('failed');
  return create(GetWebhookStatisticsResponseSchema, {
    period: name,
    since: timestampFromMs(sinceMs),
    byStatus: Object.entries(stats.byStatus)
      .sort(([a], [b]) => a.localeCompare(b))
      .map(([status, n]) => ({ status, count: n })),
    total: Object.values(stats.byStatus).reduce((sum, n) => sum + n, 0),
    successRate: finished === 0 ? 0 : count('delivered') / finished,
    attempts: stats.attempts,
    responseTimeP50Ms: BigInt(stats.p50Ms ?? 0),
    responseTimeP95Ms: BigInt(stats.p95Ms ?? 0),
    lastFailure: stats.lastFailure
      ? create(LastFailureSchema, {
          deliveryId: stats.lastFailure.deliveryId,
          at: timestampFromMs(stats.lastFailure.atMs),
          responseStatus: stats.lastFailure.responseStatus ?? 0,
          error: stats.lastFailure.error ?? '',
        })
      : undefined,
  });
}
