import { ApplicationFailure } from '@temporalio/common';
import type { MikroORM } from '../db/orm';
import { WebhookEndpointSchema } from '../db';
import type { Logger } from '../config/logger';
import { RETRY_INTERVAL_MS, MAX_ATTEMPTS, FAILURE_TYPES } from '../../workflows/policy';
import { SecretBox } from '../webhooks/secret-box';
import type { Config } from '../config';
import type { AttemptOutcome, DeliveryActivities, DeliveryRef } from './contract';
import { OutboundError, createOutboundClient, type OutboundClient } from './outbound';
import { signedHeaders } from './signing';
import { deliveriesStopped } from './kill-switch';
import type { DeliveryRow } from './store';

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
      const [delivery] = await em.execute<DeliveryRow[]>(
        'select * from webhook_deliveries where id = ? and organization_id = ?',
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

      const endpoint = await em.findOne(WebhookEndpointSchema, { id: ref.endpointId, organizationId: ref.organizationId });
      if (!endpoint || endpoint.disabledAt) {
        const reason = endpoint ? 'The endpoint is disabled.' : 'The endpoint no longer exists.';
        await em.execute(
          `update webhook_deliveries set status = 'failed', last_error = ?, next_attempt_at = null, updated_at = ? where id = ?`,
          [reason, new Date(now()), ref.deliveryId],
          'run',
        );
        deps.onEvent?.('endpoint_gone');
        throw ApplicationFailure.nonRetryable(reason, FAILURE_TYPES.endpointGone);
      }

      if (await deliveriesStopped(em, ref.organizationId)) {
        await em.execute(
          `update webhook_deliveries set status = 'held', next_attempt_at = ?, updated_at = ? where id = ?`,
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

      const secret = deps.secrets.open({ keyId: endpoint.secretKeyId, ciphertext: Buffer.from(endpoint.secretCiphertext) }, endpoint.id);
      let status: number | null = null;
      let error: string | null = null;
      try {
        const response = await deps.outbound.post(endpoint.url, signedHeaders(secret, delivery.payload, now()), delivery.payload);
        status = response.status;
        if (status < 200 || status >= 300) error = `The endpoint answered HTTP ${status}.`;
      } catch (cause) {
        if (!(cause instanceof OutboundError)) throw cause;
        error = cause.message;
      }

      if (error === null) {
        const at = new Date(now());
        await em.execute(
          `update webhook_deliveries set status = 'delivered', attempt_count = ?, delivered_at = ?, last_response_status = ?,
                  last_error = null, next_attempt_at = null, updated_at = ? where id = ?`,
          [attempt, at, status, at, ref.deliveryId],
          'run',
        );
        await em.execute('update delivery_attempts set finished_at = ?, response_status = ? where delivery_id = ? and attempt = ?', [at, status, ref.deliveryId, attempt], 'run');
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
          `update webhook_deliveries set status = 'retrying', attempt_count = ?, last_error = ?, last_response_status = ?,
                  next_attempt_at = ?, updated_at = ? where id = ?`,
          [number, reason, responseStatus, next, at, ref.deliveryId],
          'run',
        );
        await em.execute(
          'update delivery_attempts set finished_at = ?, response_status = ?, error = ? where delivery_id = ? and attempt = ? and finished_at is null',
          [at, responseStatus, reason, ref.deliveryId, number],
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
