import { create } from '@bufbuild/protobuf';
import { createContextKey, type Interceptor } from '@connectrpc/connect';
import { jsonWriterOf } from './json-writer';

/** Where the REST gateway finds the JSON of a successful call, written once from its message. */
export interface RestAnswer {
  json: string | null;
}

/** Set by the REST gateway only: other transports' answers are written by their protocol. */
export const restAnswerKey = createContextKey<RestAnswer | null>(null, { description: 'REST answer' });

/**
 * Outermost interceptor: writes the answer of a successful REST call as JSON with the
 * compiled writer (json-writer.ts) and hands connect-es an empty message of the same type
 * to serialize in its place, so the answer is turned into JSON once, without the object
 * Protobuf-ES would build and `JSON.stringify` walk again. Every interceptor inside sees
 * the real message. A type the writer does not know, or a value it refuses, goes through
 * connect-es as before, with the same outcome (and the same error) as on Connect.
 */
export function createRestAnswerInterceptor(): Interceptor {
  return (next) => async (req) => {
    const res = await next(req);
    const answer = req.contextValues.get(restAnswerKey);
    if (!answer || res.stream) return res;
    const write = jsonWriterOf(res.method.output);
    if (!write) return res;
    try {
      answer.json = write(res.message);
    } catch {
      return res;
    }
    return { ...res, message: create(res.method.output) };
  };
}
