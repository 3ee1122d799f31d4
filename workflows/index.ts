export { deliverWebhook } from './delivery';
