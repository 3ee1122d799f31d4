import type { Client } from '@connectrpc/connect';
import type { OperatorService } from '../gen/publishing/operator/v1/operator_service_pb';

/** The options `erase` reads, as the CLI parsed them. */
interface EraseOptions {
  org?: string;
  endpoint?: string;
  event?: string;
  reason?: string;
  'dry-run'?: boolean;
}

/** What the CLI lends a command: its checks of an id and of a text option, which refuse bad usage before anything is sent. */
interface CommandTools {
  id(values: EraseOptions, name: 'org' | 'endpoint', required?: boolean): string;
  text(values: EraseOptions, name: 'event' | 'reason'): string | undefined;
}

/**
 * `erase --org ID [--endpoint ID] [--event EVENT_ID] [--dry-run] [--reason TEXT]`: erases
 * an organization's delivery payloads and response excerpts (OperatorService/EraseDeliveryData).
 */
export function eraseCommand(tools: CommandTools) {
  return {
    options: ['org', 'endpoint', 'event', 'dry-run', 'reason'] as const,
    prepare(values: EraseOptions) {
      const request = {
        organizationId: tools.id(values, 'org', true),
        endpointId: tools.id(values, 'endpoint'),
        eventId: tools.text(values, 'event') ?? '',
        reason: tools.text(values, 'reason') ?? '',
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
}
