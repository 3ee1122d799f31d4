export {
  createOutboundClient,
  OutboundError,
  type OutboundClient,
  type OutboundErrorKind,
  type OutboundOptions,
  type OutboundResponse,
  type PostOptions,
  type Resolver,
} from './client';
export {
  classifyAddress,
  createAddressPolicy,
  isIpLiteral,
  FORBIDDEN_REASON_TEXT,
  type AddressPolicy,
  type AddressVerdict,
  type ForbiddenReason,
} from './address-policy';
