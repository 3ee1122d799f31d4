export { openDatabase, migrate, MikroORM, type EntityManager } from './orm';
export { entityManagerKey, entityManagerOf } from './context';
export * from './entities';
export { isUniqueViolation } from './errors';
export { resolveDatabaseUrl, EmbeddedDatabaseBusyError, type ResolvedDatabase } from './resolve';
export { pageSizeOf, encodeCursor, decodeCursor, afterCursor, pageOf, LAST_INSTANT_MS, type Cursor } from './pagination';
export { isUuid } from './ids';
