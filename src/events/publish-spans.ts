/** What a publish's span says before it runs: how many events, and whose (when one organization's, one type). */
export function publishAttributes(events: readonly { organizationId: string; eventType: string }[], publisher: string): Record<string, string | number> {
  const organizations = new Set(events.map((e) => e.organizationId));
  const types = new Set(events.map((e) => e.eventType));
  return {
    'publishing.caller': publisher,
    'publishing.events': events.length,
    ...(organizations.size === 1 && { 'publishing.organization_id': events[0]!.organizationId }),
    ...(types.size === 1 && { 'publishing.event_type': events[0]!.eventType }),
  };
}

/** And once recorded: the events recorded before (replayed) and the deliveries recorded now. */
export function publishedAttributes(published: readonly { replayed: boolean; deliveries: readonly unknown[] }[]): Record<string, number> {
  return {
    'publishing.replayed': published.filter((e) => e.replayed).length,
    'publishing.deliveries': published.reduce((sum, e) => sum + (e.replayed ? 0 : e.deliveries.length), 0),
  };
}
