import { createClient, type Client, type Interceptor, type Transport } from '@connectrpc/connect';
import { createConnectTransport, createGrpcTransport, createGrpcWebTransport } from '@connectrpc/connect-node';
import type { DescService } from '@bufbuild/protobuf';

export type TransportName = 'grpc' | 'connect' | 'grpc-web';

export function transport(baseUrl: string, name: TransportName, apiKey?: string): Transport {
  const withKey: Interceptor = (next) => async (req) => {
    req.header.set('authorization', `Bearer ${apiKey}`);
    return next(req);
  };
  const interceptors = apiKey ? [withKey] : [];
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

/** A REST call with real HTTP; returns status, parsed JSON body and headers. */
export async function rest(
  baseUrl: string,
  method: string,
  path: string,
  options: { apiKey?: string; body?: unknown; rawBody?: string | Buffer; headers?: Record<string, string> } = {},
): Promise<{ status: number; body: any; headers: Headers }> {
  const headers: Record<string, string> = { ...options.headers };
  if (options.apiKey) headers.authorization = `Bearer ${options.apiKey}`;
  let body: string | Buffer | undefined;
  if (options.rawBody !== undefined) body = options.rawBody;
  else if (options.body !== undefined) {
    body = JSON.stringify(options.body);
    headers['content-type'] ??= 'application/json';
  }
  const response = await fetch(`${baseUrl}${path}`, { method, headers, body });
  const text = await response.text();
  let parsed: unknown = text;
  try {
    parsed = text ? JSON.parse(text) : null;
  } catch {
    // Non-JSON bodies are returned as text for the assertion to show.
  }
  return { status: response.status, body: parsed, headers: response.headers };
}
