export { appendAuditEvent, queryAuditEvents, type AuditEntry, type AuditEventRow, type AuditQuery } from './trail';
export { auditedTransaction, createAuditInterceptor, noteAuditTarget } from './interceptor';
