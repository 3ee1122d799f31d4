import { ApplicationFailure } from '@temporalio/common';
import type { MikroORM } from '../db/orm';
import type { Logger } from '../config/logger';
import { RETRY_INTERVAL_MS, MAX_ATTEMPTS, FAILURE_TYPES } from '../../workflows/policy';
import { SecretBox } from '../webhooks/secret-box';
import type { Config } from '../config';
import type { AttemptOutcome, DeliveryActivities, DeliveryRef } from './contract';
import { OutboundError, createOutboundClient, type OutboundClient } from './outbound';
import { signedHeaders } from './signing';
import { GLOBAL_SCOPE } from './kill-switch';

interface AttemptRow {
  status: string;
  attempt_count: number;
  last_error: string | null;
  last_response_status: number | null;
  payload: string;
  /** Null when the endpoint no longer exists. */
  endpoint_id: string | null;
  url: string;
  disabled_at: Date | string | null;
  secret_key_id: string;
  secret_ciphertext: Buffer;
  stopped: boolean;
}

export type DeliveryEvent = 'attempt_delivered' | 'attempt_failed' | 'held' | 'endpoint_gone' | 'dead_lettered';

export interface ActivityDeps {
  orm: MikroORM;
  secrets: SecretBox;
  outbound: OutboundClient;
  logger: Logger;
  now?: () => number;
  /** Production: the contract's 30 s. Only the embedded engine's test configuration shortens it. */
  retryIntervalMs?: number;
  /** Told what happened to each delivery, for metrics. */
  onEvent?: (event: DeliveryEvent) => void;
}

/**
 * The delivery activities, shared by the Temporal worker and the embedded engine. The
 * delivery row is the source of truth: every attempt is numbered from it and written
 * back to it, so both engines show the same status, attempts, next time and last error.
 */
export function createActivities(deps: ActivityDeps): DeliveryActivities {
  const now = deps.now ?? Date.now;
  const interval = deps.retryIntervalMs ?? RETRY_INTERVAL_MS;

  return {
    async attemptDelivery(ref: DeliveryRef): Promise<AttemptOutcome> {
      const em = deps.orm.em.fork();
      // One read for everything an attempt decides on: the delivery, its endpoint and the kill switches.
      const [delivery] = await em.execute<AttemptRow[]>(
        `select d.status, d.attempt_count, d.last_error, d.last_response_status, d.payload,
                e.id as endpoint_id, e.url, e.disabled_at, e.secret_key_id, e.secret_ciphertext,
                exists (select 1 from kill_switches k where k.enabled and k.scope in ('${GLOBAL_SCOPE}', d.organization_id::text)) as stopped
           from webhook_deliveries d
           left join webhook_endpoints e on e.id = d.endpoint_id and e.organization_id = d.organization_id
          where d.id = ? and d.organization_id = ?`,
        [ref.deliveryId, ref.organizationId],
      );
      if (!delivery) throw ApplicationFailure.nonRetryable('The delivery record no longer exists.', FAILURE_TYPES.endpointGone);
      // A finished delivery stays finished, even if an engine starts it again.
      if (delivery.status === 'delivered') {
        return { kind: 'delivered', attempt: delivery.attempt_count, status: delivery.last_response_status ?? 200 };
      }
      if (delivery.status === 'failed') throw ApplicationFailure.nonRetryable(delivery.last_error ?? 'failed', FAILURE_TYPES.endpointGone);
      if (delivery.status === 'dead_lettered' || delivery.attempt_count >= MAX_ATTEMPTS) {
        throw ApplicationFailure.nonRetryable(`All ${MAX_ATTEMPTS} attempts are used.`, FAILURE_TYPES.attemptsExhausted);
      }

      if (!delivery.endpoint_id || delivery.disabled_at) {
        const reason = delivery.endpoint_id ? 'The endpoint is disabled.' : 'The endpoint no longer exists.';
        await em.execute(
          `update webhook_deliveries set status = 'failed', last_error = ?, next_attempt_at = null, lease_until = null, updated_at = ? where id = ?`,
          [reason, new Date(now()), ref.deliveryId],
          'run',
        );
        deps.onEvent?.('endpoint_gone');
        throw ApplicationFailure.nonRetryable(reason, FAILURE_TYPES.endpointGone);
      }

      if (delivery.stopped) {
        await em.execute(
          `update webhook_deliveries set status = 'held', next_attempt_at = ?, lease_until = null, updated_at = ? where id = ?`,
          [new Date(now() + interval), new Date(now()), ref.deliveryId],
          'run',
        );
        deps.onEvent?.('held');
        return { kind: 'held' };
      }

      // One row per attempt number: if another worker already made this attempt (and
      // died before recording it), it counts as failed and is never sent twice.
      const attempt = delivery.attempt_count + 1;
      const started = new Date(now());
      const claimed = await em.execute<{ attempt: number }[]>(
        `insert into delivery_attempts (delivery_id, attempt, started_at) values (?, ?, ?)
         on conflict (delivery_id, attempt) do nothing returning attempt`,
        [ref.deliveryId, attempt, started],
      );
      if (claimed.length === 0) {
        await recordFailure(attempt, 'The attempt was interrupted before its result was recorded.', null);
        throw ApplicationFailure.retryable(`Attempt ${attempt} was interrupted.`, FAILURE_TYPES.attemptFailed);
      }

      const secret = deps.secrets.open({ keyId: delivery.secret_key_id, ciphertext: Buffer.from(delivery.secret_ciphertext) }, delivery.endpoint_id);
      let status: number | null = null;
      let error: string | null = null;
      try {
        const response = await deps.outbound.post(delivery.url, signedHeaders(secret, delivery.payload, now()), delivery.payload);
        status = response.status;
        if (status < 200 || status >= 300) error = `The endpoint answered HTTP ${status}.`;
      } catch (cause) {
        if (!(cause instanceof OutboundError)) throw cause;
        error = cause.message;
      }

      if (error === null) {
        const at = new Date(now());
        await em.execute(
          `with finished as (
             update delivery_attempts set finished_at = ?, response_status = ? where delivery_id = ? and attempt = ?)
           update webhook_deliveries set status = 'delivered', attempt_count = ?, delivered_at = ?, last_response_status = ?,
                  last_error = null, next_attempt_at = null, lease_until = null, updated_at = ? where id = ?`,
          [at, status, ref.deliveryId, attempt, attempt, at, status, at, ref.deliveryId],
          'run',
        );
        deps.onEvent?.('attempt_delivered');
        return { kind: 'delivered', attempt, status: status ?? 200 };
      }
      await recordFailure(attempt, error, status);
      deps.onEvent?.('attempt_failed');
      deps.logger.info({ deliveryId: ref.deliveryId, attempt, error }, 'delivery attempt failed');
      throw ApplicationFailure.retryable(error, FAILURE_TYPES.attemptFailed);

      async function recordFailure(number: number, reason: string, responseStatus: number | null): Promise<void> {
        const at = new Date(now());
        const next = number < MAX_ATTEMPTS ? new Date(at.getTime() + interval) : null;
        await em.execute(
          `with finished as (
             update delivery_attempts set finished_at = ?, response_status = ?, error = ?
              where delivery_id = ? and attempt = ? and finished_at is null)
           update webhook_deliveries set status = 'retrying', attempt_count = ?, last_error = ?, last_response_status = ?,
                  next_attempt_at = ?, lease_until = null, updated_at = ? where id = ?`,
          [at, responseStatus, reason, ref.deliveryId, number, number, reason, responseStatus, next, at, ref.deliveryId],
          'run',
        );
      }
    },

    async deadLetter(ref: DeliveryRef): Promise<void> {
      const em = deps.orm.em.fork();
      const at = new Date(now());
      await em.transactional(async (tx) => {
        const updated = await tx.execute<{ last_error: string | null }[]>(
          `update webhook_deliveries set status = 'dead_lettered', next_attempt_at = null, lease_until = null, updated_at = ?
            where id = ? and organization_id = ? and status not in ('delivered', 'failed') returning last_error`,
          [at, ref.deliveryId, ref.organizationId],
        );
        if (updated.length === 0) return;
        await tx.execute(
          `insert into dead_letters (delivery_id, organization_id, endpoint_id, last_error, created_at)
           values (?, ?, ?, ?, ?) on conflict (delivery_id) do nothing`,
          [ref.deliveryId, ref.organizationId, ref.endpointId, updated[0]?.last_error ?? null, at],
          'run',
        );
        deps.onEvent?.('dead_lettered');
      });
    },
  };
}

/** The activities as configured for this deployment: the API's embedded engine and the Temporal worker use the same. */
export function activitiesFromConfig(
  config: Pick<Config, 'secretKeys' | 'currentSecretKeyId' | 'delivery'>,
  deps: Pick<ActivityDeps, 'orm' | 'logger' | 'now' | 'onEvent'>,
): DeliveryActivities {
  return createActivities({
    ...deps,
    secrets: new SecretBox(config.secretKeys, config.currentSecretKeyId),
    outbound: createOutboundClient({
      allowCidrs: config.delivery.allowCidrs,
      extraCa: config.delivery.extraCaPem ?? undefined,
      timeoutMs: config.delivery.attemptTimeoutMs,
      maxResponseBytes: config.delivery.maxResponseBytes,
    }),
    retryIntervalMs: config.delivery.retryIntervalMs,
  });
}
