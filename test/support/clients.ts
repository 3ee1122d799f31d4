import { type Code, ConnectError, createClient, type Client, type Interceptor, type Transport } from '@connectrpc/connect';
import { createConnectTransport, createGrpcTransport, createGrpcWebTransport } from '@connectrpc/connect-node';
import type { DescService } from '@bufbuild/protobuf';
import { ErrorInfoSchema } from '../../src/gen/google/rpc/error_details_pb';

export type TransportName = 'grpc' | 'connect' | 'grpc-web';

/** Sends `apiKey` as the bearer credential on every call; none without a key. */
export function authorizedAs(apiKey?: string): Interceptor[] {
  const withKey: Interceptor = (next) => async (req) => {
    req.header.set('authorization', `Bearer ${apiKey}`);
    return next(req);
  };
  return apiKey ? [withKey] : [];
}

export function transport(baseUrl: string, name: TransportName, apiKey?: string): Transport {
  const interceptors = authorizedAs(apiKey);
  switch (name) {
    case 'grpc':
      return createGrpcTransport({ baseUrl, interceptors });
    case 'grpc-web':
      return createGrpcWebTransport({ baseUrl, httpVersion: '1.1', interceptors });
    case 'connect':
      return createConnectTransport({ baseUrl, httpVersion: '1.1', interceptors });
  }
}

export function client<T extends DescService>(service: T, baseUrl: string, name: TransportName, apiKey?: string): Client<T> {
  return createClient(service, transport(baseUrl, name, apiKey));
}

/** The gRPC code and ErrorInfo reason a call failed with; throws when it did not fail. */
export async function failureOf(call: Promise<unknown>): Promise<{ code: Code; reason: string | undefined }> {
  try {
    await call;
  } catch (error) {
    const e = ConnectError.from(error);
    return { code: e.code, reason: e.findDetails(ErrorInfoSchema)[0]?.reason };
  }
  throw new Error('expected the call to fail');
}

/** Sends a request for a path (with its query) to an app; the path is resolved on the app's origin. */
export type AppFetch = (path: string, init?: RequestInit) => Promise<Response>;

export interface RestAnswer {
  status: number;
  body: any;
  headers: Headers;
}

export interface RestOptions {
  apiKey?: string;
  body?: unknown;
  rawBody?: string | Buffer;
  headers?: Record<string, string>;
}

/** A REST call with real HTTP; returns status, parsed JSON body and headers. */
export function rest(baseUrl: string, method: string, path: string, options: RestOptions = {}): Promise<RestAnswer> {
  return restVia((target, init) => fetch(`${baseUrl}${target}`, init), method, path, options);
}

/** A REST call through `send`, over a socket or in process. */
export async function restVia(send: AppFetch, method: string, path: string, options: RestOptions = {}): Promise<RestAnswer> {
  const headers: Record<string, string> = { ...options.headers };
  if (options.apiKey) headers.authorization = `Bearer ${options.apiKey}`;
  let body: string | Buffer | undefined;
  if (options.rawBody !== undefined) body = options.rawBody;
  else if (options.body !== undefined) {
    body = JSON.stringify(options.body);
    headers['content-type'] ??= 'application/json';
  }
  const response = await send(path, { method, headers, body });
  const text = await response.text();
  let parsed: unknown = text;
  try {
    parsed = text ? JSON.parse(text) : null;
  } catch {
    // Non-JSON bodies are returned as text for the assertion to show.
  }
  return { status: response.status, body: parsed, headers: response.headers };
}
