import { createHash } from 'node:crypto';
import type { DeliveryRef } from './contract';

/** Prefix operators search by in the Temporal UI (`WorkflowId STARTS_WITH "webhook-delivery/"`). */
export const DELIVERY_WORKFLOW_ID_PREFIX = 'webhook-delivery';

/**
 * The longest delivery workflow id: Temporal's SQL stores keep workflow ids in
 * 255-character columns, and 15 characters stay free for what a later run of the same
 * delivery appends to name itself.
 */
export const MAX_DELIVERY_WORKFLOW_ID_LENGTH = 240;

/**
 * One workflow id per (endpoint, event) and series of attempts, so starting the same
 * delivery twice hits the same execution. Each part is URI-encoded so an id containing "/"
 * cannot collide with another. An id that would be longer than MAX_DELIVERY_WORKFLOW_ID_LENGTH
 * (a long event id full of ":", which encodes to three characters) names the event by the
 * SHA-256 of its id instead, behind a "~" no encoded event id can start with. Either way the
 * delivery row stores the id, and the workflow's EventId search attribute and memo keep the
 * event id as sent. A resend's series (2, 3, ...) runs as a workflow of its own: the id of
 * series 1 with `/series-<n>` appended, within the 15 characters left for it; series 1
 * keeps the id deliveries had before resends existed.
 */
export function workflowIdFor(ref: Pick<DeliveryRef, 'organizationId' | 'endpointId' | 'eventId'>, series = 1): string {
  const { workflowHead, workflowTail } = workflowIdParts(ref.organizationId, ref.eventId, ref.endpointId.length);
  return `${workflowHead}${encodeURIComponent(ref.endpointId)}${workflowTail}${series > 1 ? `/series-${series}` : ''}`;
}

/**
 * workflowIdFor's id around the endpoint id, for a statement that records an event's
 * deliveries and builds each id as head || endpoint id || tail: a uuid's text (36
 * characters, the default length) is unchanged by encodeURIComponent, so the result is workflowIdFor's.
 */
export function workflowIdParts(organizationId: string, eventId: string, endpointIdLength = 36): { workflowHead: string; workflowTail: string } {
  const workflowHead = `${DELIVERY_WORKFLOW_ID_PREFIX}/${encodeURIComponent(organizationId)}/`;
  const encoded = `/${encodeURIComponent(eventId)}`;
  const fits = workflowHead.length + endpointIdLength + encoded.length <= MAX_DELIVERY_WORKFLOW_ID_LENGTH;
  return { workflowHead, workflowTail: fits ? encoded : `/~${createHash('sha256').update(eventId).digest('hex')}` };
}

/**
 * Where an operator sees a delivery's workflow in the Temporal UI: its namespace's workflow
 * list filtered to that id (every run of it, newest first), a page the UI has kept stable
 * across versions where the run-specific paths have changed.
 */
export function workflowUiLink(uiUrl: string, namespace: string, workflowId: string): string {
  const query = `WorkflowId="${workflowId}"`;
  return `${uiUrl.replace(/\/+$/, '')}/namespaces/${encodeURIComponent(namespace)}/workflows?query=${encodeURIComponent(query)}`;
}
