/**
 * The length-prefixed frames of gRPC, gRPC-web and Connect streaming bodies, for suites that
 * write requests and read answers byte by byte.
 */

/** One frame: a flags byte, the payload's length (or `declared`, to lie about it), the payload. */
export function envelope(payload: Uint8Array, flags = 0, declared = payload.length): Buffer {
  const head = Buffer.alloc(5);
  head.writeUInt8(flags, 0);
  head.writeUInt32BE(declared, 1);
  return Buffer.concat([head, payload]);
}

/** The trailer frame (flag 0x80) of a gRPC-web response body, as header fields. */
export function grpcWebTrailers(body: Buffer): Record<string, string> {
  const fields: Record<string, string> = {};
  for (let offset = 0; offset + 5 <= body.length; offset += 5 + body.readUInt32BE(offset + 1)) {
    if (!(body.readUInt8(offset) & 0x80)) continue;
    for (const line of body.subarray(offset + 5, offset + 5 + body.readUInt32BE(offset + 1)).toString('utf8').split('\r\n')) {
      const colon = line.indexOf(':');
      if (colon > 0) fields[line.slice(0, colon).trim().toLowerCase()] = line.slice(colon + 1).trim();
    }
  }
  return fields;
}
