export { openDatabase, migrate, migrateAs, MikroORM, LockMode, type EntityManager } from './orm';
export { OWNER_ROLE, SERVICE_ROLE, ensureRole, ensureServiceRoles, serviceRoleProblems } from './roles';
export { entityManagerKey, entityManagerOf } from './context';
export * from './entities';
export { isUniqueViolation, isDatabaseUnavailable } from './errors';
export { resolveDatabaseUrl, EmbeddedDatabaseBusyError, type ResolvedDatabase } from './resolve';
export { pageSizeOf, encodeCursor, decodeCursor, afterCursor, pageOf, PageRequestError, LAST_INSTANT_MS, type Cursor } from './pagination';
export { isUuid } from './ids';
export { epochMs } from './epoch';
