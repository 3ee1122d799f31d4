import { MAX_DELIVERY_WORKFLOW_ID_LENGTH, workflowIdFor } from '../../src/delivery';

/** A resend's series runs as a workflow of its own; the first series keeps the id deliveries always had. */
const ref = { organizationId: '0b6f7c1e-58a5-4a55-9f0b-6a4f1f0b8c11', endpointId: '3f1d2c4b-7e8a-4c2d-9b1e-5a6c7d8e9f00', eventId: 'evt_42' };

it('keeps the id of series 1 and appends the series after it', () => {
  expect(workflowIdFor(ref)).toBe(`webhook-delivery/${ref.organizationId}/${ref.endpointId}/evt_42`);
  expect(workflowIdFor(ref, 1)).toBe(workflowIdFor(ref));
  expect(workflowIdFor(ref, 2)).toBe(`${workflowIdFor(ref)}/series-2`);
});

it("stays within Temporal's 255 characters for the longest event id and a six-digit series", () => {
  const long = { ...ref, eventId: ':'.repeat(128) };
  const id = workflowIdFor(long, 999_999);
  expect(id.length).toBeLessThanOrEqual(255);
  expect(workflowIdFor(long).length).toBeLessThanOrEqual(MAX_DELIVERY_WORKFLOW_ID_LENGTH);
  expect(id.startsWith(`${workflowIdFor(long)}/`)).toBe(true);
});
