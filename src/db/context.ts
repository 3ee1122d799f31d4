import { createContextKey, type HandlerContext } from '@connectrpc/connect';
import type { EntityManager } from './orm';

/** The request's own EntityManager fork, set by the request-context interceptor. */
export const entityManagerKey = createContextKey<EntityManager | null>(null, { description: 'entity manager' });

export function entityManagerOf(ctx: Pick<HandlerContext, 'values'>): EntityManager {
  const em = ctx.values.get(entityManagerKey);
  if (!em) throw new Error('no EntityManager in the request context');
  return em;
}
