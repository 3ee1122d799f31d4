import { ScalarType, type DescField, type DescMessage } from '@bufbuild/protobuf';
import { FeatureSet_FieldPresence } from '@bufbuild/protobuf/wkt';
import { base64Encode } from '@bufbuild/protobuf/wire';

/**
 * proto3 JSON written straight to a string, for the answers the REST gateway writes.
 *
 * Protobuf-ES's `toJsonString` builds a JSON object of the whole message, then has
 * `JSON.stringify` walk it again; for a page of 50 endpoints with 250 deliveries that was
 * a quarter of the list call's CPU (bench/README.md, List). This writer is compiled once
 * per message type from its descriptor and gives the same text as `toJsonString` with the
 * default options (the router sets no `jsonOptions`): fields in number order, JSON names,
 * implicit zero values and unset fields left out, 64-bit integers as strings, enums by
 * name, timestamps in RFC 3339 as Protobuf-ES writes them. test/server/json-writer.test.ts
 * holds it to that over generated messages.
 *
 * It knows the field kinds this API's answers use; a message type with anything else (a
 * map, a oneof, a well-known type other than Timestamp, a required field) gets no writer,
 * and its answers keep going through Protobuf-ES. A value Protobuf-ES would refuse throws,
 * and the caller lets Protobuf-ES write (and refuse) it as before.
 */
export type JsonWriter = (message: object) => string;

type Fields = Record<string, unknown>;
/** A field's `"name":value`, or '' when the field is left out. */
type FieldWriter = (message: Fields) => string;
type ValueWriter = (value: unknown) => string;

const compiled = new WeakMap<DescMessage, JsonWriter | null>();

/** The writer of a message type, or null when its answers must go through Protobuf-ES. */
export function jsonWriterOf(schema: DescMessage): JsonWriter | null {
  const known = compiled.get(schema);
  if (known !== undefined) return known;
  const writer = compileMessage(schema, new Map());
  compiled.set(schema, writer);
  return writer;
}

/** `pending` holds the writers of the types being compiled, so a recursive type refers to itself. */
function compileMessage(desc: DescMessage, pending: Map<DescMessage, JsonWriter>): JsonWriter | null {
  const known = compiled.get(desc) ?? pending.get(desc);
  if (known !== undefined) return known;
  if (desc.typeName === 'google.protobuf.Timestamp') return writeTimestamp as JsonWriter;
  if (desc.typeName.startsWith('google.protobuf.')) return null;
  const typeName = desc.typeName;
  const fieldWriters: FieldWriter[] = [];
  const writer: JsonWriter = (message) => {
    if ((message as Fields).$typeName !== typeName) throw new Error(`cannot write ${String((message as Fields).$typeName)} as ${typeName}`);
    let json = '{';
    for (const writeField of fieldWriters) {
      const part = writeField(message as Fields);
      if (part !== '') json += json.length === 1 ? part : `,${part}`;
    }
    return `${json}}`;
  };
  pending.set(desc, writer);
  for (const field of [...desc.fields].sort((a, b) => a.number - b.number)) {
    const writeField = compileField(field, pending);
    if (!writeField) return null;
    fieldWriters.push(writeField);
  }
  return writer;
}

function compileField(field: DescField, pending: Map<DescMessage, JsonWriter>): FieldWriter | null {
  if (field.oneof || field.jsonName === '__proto__' || field.presence === FeatureSet_FieldPresence.LEGACY_REQUIRED) return null;
  const key = `${JSON.stringify(field.jsonName)}:`;
  const localName = field.localName;
  switch (field.fieldKind) {
    case 'map':
      return null;
    case 'list': {
      const writeItem =
        field.listKind === 'message' ? compileMessage(field.message, pending) : field.listKind === 'enum' ? enumWriter(field) : scalarWriter(field.scalar);
      if (!writeItem) return null;
      return (message) => {
        const items = message[localName] as unknown[];
        if (items.length === 0) return '';
        let json = `${key}[`;
        for (let i = 0; i < items.length; i++) json += i === 0 ? writeItem(items[i] as object) : `,${writeItem(items[i] as object)}`;
        return `${json}]`;
      };
    }
    case 'message': {
      const writeMessage = compileMessage(field.message, pending);
      if (!writeMessage) return null;
      return (message) => {
        const value = message[localName];
        return value !== undefined && Object.prototype.hasOwnProperty.call(message, localName) ? key + writeMessage(value as object) : '';
      };
    }
    case 'enum':
    case 'scalar': {
      const writeValue = field.fieldKind === 'enum' ? enumWriter(field) : scalarWriter(field.scalar);
      if (!writeValue) return null;
      if (field.presence !== FeatureSet_FieldPresence.IMPLICIT) {
        return (message) => {
          const value = message[localName];
          return value !== undefined && Object.prototype.hasOwnProperty.call(message, localName) ? key + writeValue(value) : '';
        };
      }
      const isZero = zeroTest(field);
      return (message) => {
        const value = message[localName];
        return isZero(value) ? '' : key + writeValue(value);
      };
    }
  }
}

/** When an implicit-presence field is left out: the same tests as Protobuf-ES's writer. */
function zeroTest(field: DescField & { fieldKind: 'scalar' | 'enum' }): (value: unknown) => boolean {
  if (field.fieldKind === 'enum') {
    const zero = field.enum.values[0]?.number;
    return (value) => value === zero;
  }
  switch (field.scalar) {
    case ScalarType.BOOL:
      return (value) => value === false;
    case ScalarType.STRING:
      return (value) => value === '';
    case ScalarType.BYTES:
      return (value) => value instanceof Uint8Array && value.byteLength === 0;
    case ScalarType.DOUBLE:
    case ScalarType.FLOAT:
      return (value) => Object.is(value, 0);
    default:
      // Loose, as Protobuf-ES: 0, 0n and "0" are all zero.
      return (value) => (value as number) == 0;
  }
}

function enumWriter(field: DescField & { fieldKind: 'enum' | 'list' }): ValueWriter | null {
  const desc = field.enum;
  if (!desc || desc.typeName === 'google.protobuf.NullValue') return null;
  return (value) => {
    if (typeof value !== 'number') throw new Error(`${desc.typeName}: expected a number`);
    const known = desc.value[value];
    return known ? JSON.stringify(known.jsonName) : numberJson(value);
  };
}

function scalarWriter(scalar: ScalarType | undefined): ValueWriter | null {
  switch (scalar) {
    case ScalarType.STRING:
      return (value) => {
        if (typeof value !== 'string') throw new Error('expected a string');
        return JSON.stringify(value);
      };
    case ScalarType.BOOL:
      return (value) => {
        if (typeof value !== 'boolean') throw new Error('expected a boolean');
        return value ? 'true' : 'false';
      };
    case ScalarType.INT32:
    case ScalarType.SINT32:
    case ScalarType.SFIXED32:
    case ScalarType.UINT32:
    case ScalarType.FIXED32:
      return (value) => {
        if (typeof value !== 'number') throw new Error('expected a number');
        return numberJson(value);
      };
    case ScalarType.DOUBLE:
    case ScalarType.FLOAT:
      return (value) => {
        if (typeof value !== 'number') throw new Error('expected a number');
        if (Number.isNaN(value)) return '"NaN"';
        if (value === Infinity) return '"Infinity"';
        if (value === -Infinity) return '"-Infinity"';
        return numberJson(value);
      };
    case ScalarType.INT64:
    case ScalarType.SINT64:
    case ScalarType.SFIXED64:
    case ScalarType.UINT64:
    case ScalarType.FIXED64:
      return (value) => {
        if (typeof value === 'bigint' || typeof value === 'string' || (typeof value === 'number' && Number.isInteger(value))) {
          return JSON.stringify(value.toString());
        }
        throw new Error('expected an integer');
      };
    case ScalarType.BYTES:
      return (value) => {
        if (!(value instanceof Uint8Array)) throw new Error('expected bytes');
        return `"${base64Encode(value)}"`;
      };
    default:
      return null;
  }
}

/** A number as JSON.stringify writes it (a value that is not finite becomes null). */
function numberJson(value: number): string {
  return Number.isFinite(value) ? String(value) : 'null';
}

const TIMESTAMP_MS_MIN = Date.parse('0001-01-01T00:00:00Z');
const TIMESTAMP_MS_MAX = Date.parse('9999-12-31T23:59:59Z');

/** Protobuf-ES's timestampToJson, quoted: the same range checks and the same 0, 3, 6 or 9 digits of fraction. */
function writeTimestamp(message: { $typeName: string; seconds: bigint; nanos: number }): string {
  if (message.$typeName !== 'google.protobuf.Timestamp') throw new Error(`cannot write ${message.$typeName} as a timestamp`);
  const ms = Number(message.seconds) * 1000;
  if (!(ms >= TIMESTAMP_MS_MIN && ms <= TIMESTAMP_MS_MAX)) throw new Error('timestamp out of range');
  const nanos = message.nanos;
  if (!(nanos >= 0 && nanos <= 999_999_999)) throw new Error('timestamp nanos out of range');
  let z = 'Z';
  if (nanos > 0) {
    const digits = (nanos + 1_000_000_000).toString().substring(1);
    if (digits.substring(3) === '000000') z = `.${digits.substring(0, 3)}Z`;
    else if (digits.substring(6) === '000') z = `.${digits.substring(0, 6)}Z`;
    else z = `.${digits}Z`;
  }
  return `"${new Date(ms).toISOString().replace('.000Z', z)}"`;
}
