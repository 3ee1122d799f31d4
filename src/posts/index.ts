export { PostServiceImpl } from './service';
export { holdScheduledPosts, releaseHeldPosts, type HoldReason } from './holds';
