import { create } from '@bufbuild/protobuf';
import { Code, ConnectError } from '@connectrpc/connect';
import { ErrorInfoSchema } from '../gen/google/rpc/error_details_pb';

/**
 * Every stable error code the service returns, with the gRPC code and HTTP status it
 * travels as. Clients branch on `code` (REST body) or the ErrorInfo `reason` (gRPC);
 * both carry the same string. The README's error table lists these.
 */
export const ERRORS = {
  // Request shape (mostly raised by the REST gateway)
  ROUTE_NOT_FOUND: [Code.NotFound, 404],
  METHOD_NOT_ALLOWED: [Code.Unimplemented, 405],
  MALFORMED_JSON: [Code.InvalidArgument, 400],
  INVALID_UTF8: [Code.InvalidArgument, 400],
  INVALID_ARGUMENT: [Code.InvalidArgument, 400],
  PAYLOAD_TOO_LARGE: [Code.ResourceExhausted, 413],
  UNSUPPORTED_MEDIA_TYPE: [Code.InvalidArgument, 415],
  // What Node's HTTP/1.1 parser refuses before any route is known (see src/server/edge/parser-refusals.ts)
  MALFORMED_REQUEST: [Code.InvalidArgument, 400],
  HEADERS_TOO_LARGE: [Code.InvalidArgument, 431],
  REQUEST_TIMEOUT: [Code.DeadlineExceeded, 408],
  NOT_IMPLEMENTED: [Code.Unimplemented, 501],
  INTERNAL: [Code.Internal, 500],
  NOT_FOUND: [Code.NotFound, 404],
  CONFLICT: [Code.AlreadyExists, 409],
  FAILED_PRECONDITION: [Code.FailedPrecondition, 400],
  DEADLINE_EXCEEDED: [Code.DeadlineExceeded, 504],
  CANCELED: [Code.Canceled, 499],
  UNAVAILABLE: [Code.Unavailable, 503],

  // Authentication and permissions
  AUTHENTICATION_REQUIRED: [Code.Unauthenticated, 401],
  API_KEY_INVALID: [Code.Unauthenticated, 401],
  API_KEY_REVOKED: [Code.Unauthenticated, 401],
  SCOPE_MISSING: [Code.PermissionDenied, 403],
  PERMISSION_DENIED: [Code.PermissionDenied, 403],
  OPERATOR_CREDENTIAL_REQUIRED: [Code.Unauthenticated, 401],
  INTERNAL_CREDENTIAL_REQUIRED: [Code.Unauthenticated, 401],

  // Connections
  CAPABILITY_UNSUPPORTED: [Code.FailedPrecondition, 422],
  CONNECTION_NOT_FOUND: [Code.NotFound, 404],
  CONNECTION_DISCONNECTED: [Code.FailedPrecondition, 409],
  STATE_INVALID: [Code.InvalidArgument, 400],
  STATE_EXPIRED: [Code.FailedPrecondition, 410],
  STATE_USER_MISMATCH: [Code.PermissionDenied, 403],
  STATE_ORGANIZATION_MISMATCH: [Code.PermissionDenied, 403],
  STATE_ALREADY_USED: [Code.AlreadyExists, 409],
  CONNECTED_ACCOUNT_REQUIRED: [Code.InvalidArgument, 400],
  ACCOUNT_REGISTERED_ELSEWHERE: [Code.AlreadyExists, 409],
  ACCOUNT_ALREADY_CONNECTED: [Code.AlreadyExists, 409],
  CONFIRMATION_REQUIRED: [Code.InvalidArgument, 400],
  OWNER_OR_ADMIN_REQUIRED: [Code.PermissionDenied, 403],
  DISABLE_REASON_REQUIRED: [Code.InvalidArgument, 400],
  DISABLE_REASON_TOO_LONG: [Code.InvalidArgument, 400],
  PROVIDER_ACCOUNT_NOT_FOUND: [Code.FailedPrecondition, 422],
  PROVIDER_ACCOUNT_INACTIVE: [Code.FailedPrecondition, 422],
  PROVIDER_ACCOUNT_MISMATCH: [Code.FailedPrecondition, 422],
  PROVIDER_UNAVAILABLE: [Code.Unavailable, 502],

  // Posts
  POST_TEXT_INVALID: [Code.InvalidArgument, 400],
  POST_SCHEDULE_INVALID: [Code.InvalidArgument, 400],
  DESTINATION_NOT_VERIFIED: [Code.FailedPrecondition, 409],
  DESTINATION_NOT_VERIFIED_FOR_RELEASE: [Code.FailedPrecondition, 409],

  // Webhooks
  WEBHOOK_NOT_FOUND: [Code.NotFound, 404],
  WEBHOOK_DISABLED: [Code.FailedPrecondition, 409],
  WEBHOOK_URL_REQUIRED: [Code.InvalidArgument, 400],
  WEBHOOK_URL_INVALID: [Code.InvalidArgument, 400],
  WEBHOOK_URL_NOT_HTTPS: [Code.InvalidArgument, 400],
  WEBHOOK_URL_HAS_CREDENTIALS: [Code.InvalidArgument, 400],
  WEBHOOK_URL_HAS_FRAGMENT: [Code.InvalidArgument, 400],
  WEBHOOK_URL_MISSING_HOST: [Code.InvalidArgument, 400],
  WEBHOOK_URL_TOO_LONG: [Code.InvalidArgument, 400],
  WEBHOOK_URL_FORBIDDEN_ADDRESS: [Code.InvalidArgument, 400],
  WEBHOOK_DESCRIPTION_TOO_LONG: [Code.InvalidArgument, 400],
  EVENT_NAME_INVALID: [Code.InvalidArgument, 400],
  TOO_MANY_EVENT_NAMES: [Code.InvalidArgument, 400],
  RATE_LIMITED: [Code.ResourceExhausted, 429],
  PLAN_EXCLUDES_WEBHOOKS: [Code.PermissionDenied, 403],
  DELIVERY_QUOTA_EXCEEDED: [Code.ResourceExhausted, 429],
  PAGE_TOKEN_INVALID: [Code.InvalidArgument, 400],

  // Signature schemes and secret rotation
  SIGNATURE_SCHEME_INVALID: [Code.InvalidArgument, 400],
  ROTATION_OVERLAP_INVALID: [Code.InvalidArgument, 400],
  SECRET_ROTATION_IN_PROGRESS: [Code.FailedPrecondition, 409],

  // Operator service
  ORGANIZATION_NOT_FOUND: [Code.NotFound, 404],
  NOT_ENTERPRISE: [Code.FailedPrecondition, 409],
  KILL_SWITCH_REASON_REQUIRED: [Code.InvalidArgument, 400],
  DELIVERY_NOT_FOUND: [Code.NotFound, 404],
  DELIVERY_LOOKUP_INVALID: [Code.InvalidArgument, 400],
  DELIVERY_NOT_RESENDABLE: [Code.FailedPrecondition, 409],
  DELIVERY_FILTER_INVALID: [Code.InvalidArgument, 400],
  RECOVERY_WINDOW_INVALID: [Code.InvalidArgument, 400],
  RECOVERY_WINDOW_TOO_LONG: [Code.InvalidArgument, 400],
  RECOVERY_NOT_FOUND: [Code.NotFound, 404],
  EVENT_NOT_FOUND: [Code.NotFound, 404],

  // Internal event service
  EVENT_ID_INVALID: [Code.InvalidArgument, 400],
  EVENT_TYPE_INVALID: [Code.InvalidArgument, 400],
  EVENT_TYPE_RESERVED: [Code.InvalidArgument, 400],
  EVENT_PAYLOAD_TOO_LARGE: [Code.InvalidArgument, 400],
  TOO_MANY_EVENTS: [Code.InvalidArgument, 400],
  EVENT_CONFLICT: [Code.AlreadyExists, 409],
} as const satisfies Record<string, readonly [Code, number]>;

export type ErrorCode = keyof typeof ERRORS;

export const ERROR_DOMAIN = 'publishing.example';

/** The ErrorInfo detail that carries a stable code on gRPC and Connect. */
export function errorInfoDetail(code: ErrorCode, metadata: Record<string, string> = {}) {
  return { desc: ErrorInfoSchema, value: create(ErrorInfoSchema, { reason: code, domain: ERROR_DOMAIN, metadata }) };
}

/** Builds the ConnectError for a stable code; the detail carries the code on gRPC. */
export function apiError(
  code: ErrorCode,
  message: string,
  options: { metadata?: Record<string, string>; headers?: Record<string, string>; cause?: unknown } = {},
): ConnectError {
  const [grpcCode] = ERRORS[code];
  return new ConnectError(message, grpcCode, options.headers, [errorInfoDetail(code, options.metadata)], options.cause);
}

/** The stable code and metadata carried by an error, if it has one. */
export function errorInfoOf(error: ConnectError): { code: ErrorCode; metadata: Record<string, string> } | null {
  const [info] = error.findDetails(ErrorInfoSchema);
  if (!info || !(info.reason in ERRORS)) return null;
  return { code: info.reason as ErrorCode, metadata: info.metadata };
}

/** HTTP status of a stable code. */
export function httpStatusOf(code: ErrorCode): number {
  return ERRORS[code][1];
}

/** Code used when an error carries no detail: derived from its gRPC code. */
export function fallbackCodeOf(code: Code): ErrorCode {
  switch (code) {
    case Code.InvalidArgument:
      return 'INVALID_ARGUMENT';
    case Code.Unimplemented:
      return 'NOT_IMPLEMENTED';
    case Code.Unauthenticated:
      return 'AUTHENTICATION_REQUIRED';
    case Code.PermissionDenied:
      return 'PERMISSION_DENIED';
    case Code.ResourceExhausted:
      return 'PAYLOAD_TOO_LARGE';
    case Code.Unavailable:
      return 'UNAVAILABLE';
    case Code.NotFound:
      return 'NOT_FOUND';
    case Code.AlreadyExists:
      return 'CONFLICT';
    case Code.FailedPrecondition:
      return 'FAILED_PRECONDITION';
    case Code.DeadlineExceeded:
      return 'DEADLINE_EXCEEDED';
    case Code.Canceled:
      return 'CANCELED';
    default:
      return 'INTERNAL';
  }
}

