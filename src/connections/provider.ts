/**
 * The managed-OAuth provider port. The provider runs the OAuth exchange and keeps
 * the credentials; the service keeps only the connected-account reference and the
 * identity read back from the provider.
 */

/** The identity of a connected account as the provider reports it. */
export interface AccountIdentity {
  /** The platform's own id of the account, page or channel. */
  accountId: string;
  /** "business", "creator", "page", "profile" or "channel". */
  kind: string;
  displayName: string;
  handle: string;
  avatarUrl: string;
}

export interface LinkRequest {
  /** Registry slug, for example "instagram". */
  toolkit: string;
  /** Stable id of the person connecting, unique across organizations. */
  userId: string;
  /** Where the provider sends the browser back after consent. */
  callbackUrl: string;
  /** The signed state of the attempt; must come back on the callback. */
  state: string;
}

export interface Link {
  /** The provider's consent page. */
  redirectUrl: string;
  /** The provider's reference of the (pending) connected account, when it gives one up front. */
  connectedAccountId?: string;
}

export interface IdentityRequest {
  toolkit: string;
  userId: string;
  /** The provider's reference of the connected account, handed back on the callback. */
  connectedAccountId: string;
  /**
   * The signed state of the attempt being completed. The account must be the one consented
   * to in this attempt: the sandbox checks it against the state; Composio binds accounts to
   * the user instead, and checks that ownership.
   */
  state: string;
}

export interface ConnectionProvider {
  readonly name: string;
  createLink(request: LinkRequest): Promise<Link>;
  readIdentity(request: IdentityRequest): Promise<AccountIdentity>;
}

/** Why the provider could not do what was asked. Mapped to stable error codes by the service. */
export type ProviderFailure =
  /** The connected-account reference is unknown to the provider. */
  | 'CONNECTED_ACCOUNT_NOT_FOUND'
  /** The account exists but is not (or no longer) active: consent not finished, revoked, expired. */
  | 'CONNECTED_ACCOUNT_INACTIVE'
  /** The account belongs to another user or toolkit than the attempt. */
  | 'CONNECTED_ACCOUNT_MISMATCH'
  /** The provider refused our credentials or the request (4xx we cannot fix by retrying). */
  | 'PROVIDER_REJECTED'
  /** Network error, timeout, 5xx or a malformed answer. */
  | 'PROVIDER_UNAVAILABLE';

export class ProviderError extends Error {
  constructor(
    readonly failure: ProviderFailure,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
    this.name = 'ProviderError';
  }
}
