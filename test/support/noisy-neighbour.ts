/**
 * The noisy-neighbour scenario, shared by its suite (test/delivery/noisy-neighbour.test.ts) and
 * its benchmark figure (bench/figures/isolation.ts): organization A's endpoints answer slowly
 * (or never) under a burst; organization B's one endpoint answers at once while it publishes.
 */
export const A_ENDPOINTS = 8;
export const A_EVENTS = 100;
export const B_EVENTS = 20;
/** B's first publish comes this long after A's burst. */
export const B_START_AFTER_MS = 2_000;
export const B_EVERY_MS = 500;
/** A's slow endpoints answer after this, inside the 10 s attempt deadline. */
export const SLOW_ANSWER_MS = 9_000;
