import type { DeliveryRef } from './contract';

/** Prefix operators search by in the Temporal UI (`WorkflowId STARTS_WITH "webhook-delivery/"`). */
export const DELIVERY_WORKFLOW_ID_PREFIX = 'webhook-delivery';

/**
 * One workflow id per (endpoint, event), so starting the same delivery twice hits the
 * same execution. Each part is URI-encoded so an id containing "/" cannot collide with another.
 */
export function workflowIdFor(ref: Pick<DeliveryRef, 'organizationId' | 'endpointId' | 'eventId'>): string {
  const parts = [ref.organizationId, ref.endpointId, ref.eventId].map(encodeURIComponent);
  return [DELIVERY_WORKFLOW_ID_PREFIX, ...parts].join('/');
}

/**
 * workflowIdFor's id around the endpoint id, for a statement that records an event's
 * deliveries and builds each id as head || endpoint id || tail: a uuid's text is unchanged
 * by encodeURIComponent, so the result is workflowIdFor's.
 */
export function workflowIdParts(organizationId: string, eventId: string): { workflowHead: string; workflowTail: string } {
  return { workflowHead: `${DELIVERY_WORKFLOW_ID_PREFIX}/${encodeURIComponent(organizationId)}/`, workflowTail: `/${encodeURIComponent(eventId)}` };
}
