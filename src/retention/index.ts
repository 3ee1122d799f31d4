export { RetentionSweep, type RetentionSweepOptions, type SweepPass } from './sweep';
export { eraseDeliveryData, ERASURE_PAGE_SIZE, type Erasure } from './erasure';
