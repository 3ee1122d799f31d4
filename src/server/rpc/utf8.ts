import type { ConnectError } from '@connectrpc/connect';
import { apiError } from '../../errors';

/**
 * Text is taken as sent or refused: a decoder that replaced invalid UTF-8 with U+FFFD would
 * store something the client never sent (a webhook URL with replacement characters in it).
 */
const fatal = new TextDecoder('utf-8', { fatal: true });

/** The refusal of a body or string field that is not UTF-8, on every transport. */
export function invalidUtf8(what = 'The body'): ConnectError {
  return apiError('INVALID_UTF8', `${what} is not valid UTF-8.`);
}

/** Decodes UTF-8 or throws INVALID_UTF8. connect-es decodes JSON bodies with it (its jsonOptions.textDecoder). */
export const strictUtf8: { decode(input?: Uint8Array): string } = {
  decode(input) {
    try {
      return fatal.decode(input);
    } catch {
      throw invalidUtf8();
    }
  },
};

/**
 * Whether Protobuf-ES refused a message because a string field in it is not UTF-8. It checks
 * proto3 strings as it reads them (utf8_validation VERIFY): binary ones with a fatal
 * TextDecoder ("The encoded data was not valid for encoding utf-8"), JSON ones for lone
 * surrogates, which have no UTF-8 form ("... expected string: invalid UTF8"). connect-es
 * keeps only the message of what it threw, so the message is what there is to go by; the
 * transport suites pin both (test/server/invalid-utf8.test.ts).
 */
export function isInvalidUtf8Decoding(message: string): boolean {
  return /not valid for encoding utf-8|: invalid UTF8$/i.test(message);
}
