import type { Client } from '@connectrpc/connect';
import { idOption, optionText } from '../command-line';
import type { OperatorService } from '../gen/publishing/operator/v1/operator_service_pb';

/** The options `erase` reads, as the CLI parsed them. */
type EraseOptions = {
  org?: string;
  endpoint?: string;
  event?: string;
  reason?: string;
  'dry-run'?: boolean;
};

/**
 * `erase --org ID [--endpoint ID] [--event EVENT_ID] [--dry-run] [--reason TEXT]`: erases
 * an organization's delivery payloads and response excerpts (OperatorService/EraseDeliveryData).
 */
export const eraseCommand = {
  options: ['org', 'endpoint', 'event', 'dry-run', 'reason'] as const,
  prepare(values: EraseOptions) {
    const request = {
      organizationId: idOption(values, 'org', true),
      endpointId: idOption(values, 'endpoint') ?? '',
      eventId: optionText(values, 'event') ?? '',
      reason: optionText(values, 'reason') ?? '',
      dryRun: values['dry-run'] === true,
    };
    return async (operator: Client<typeof OperatorService>) => {
      const answer = await operator.eraseDeliveryData(request);
      const json = {
        organizationId: answer.organizationId,
        dryRun: answer.dryRun,
        deliveries: Number(answer.deliveries),
        payloadsErased: Number(answer.payloadsErased),
        responseExcerptsErased: Number(answer.responseExcerptsErased),
        open: Number(answer.open),
        eventPayloadsErased: Number(answer.eventPayloadsErased),
      };
      const scope = [`organization ${json.organizationId}`, request.endpointId && `endpoint ${request.endpointId}`, request.eventId && `event ${request.eventId}`].filter(Boolean).join('  ');
      const lines = [
        `${json.dryRun ? 'would erase' : 'erased'} (${scope}): ${json.payloadsErased} payloads, ${json.responseExcerptsErased} response excerpts, of ${json.deliveries} deliveries; ${json.eventPayloadsErased} event payloads`,
        ...(json.open > 0 ? [`  ${json.open} deliveries are still being sent and keep their payload: erase again once they finish`] : []),
      ];
      return { json, text: `${lines.join('\n')}\n` };
    };
  },
};
