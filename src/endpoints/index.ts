export { organizationEndpoint, endpointsPage, insertEndpoint, type ListedEndpoint, type NewEndpoint } from './endpoints';
export { EVENT_NAME_PATTERN, MAX_EVENT_NAME_LENGTH, normalizeEventNames } from './event-names';
export {
  PLANS_WITHOUT_DELIVERIES,
  planIncludesDeliveries,
  deliveryMonthOf,
  quotaRefusalOf,
  publishingOrganizations,
  createDeliveryCounts,
  takeDeliveryQuota,
  type PublishingOrganizationRow,
} from './plans';
export { subscribedEndpoints, deliveryGrants, type NewEventRow, type SubscribedRow, type GrantedRow } from './subscriptions';
export { rotateSigningSecrets } from './rotation';
