export { appendAuditEvent, queryAuditEvents, type AuditEntry, type AuditEventRow, type AuditQuery } from './trail';
export { createAuditInterceptor, noteAuditTarget } from './interceptor';
