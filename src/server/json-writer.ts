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
/**
 * Appends a message's JSON to `parts`. The pieces are joined once at the end: a string
 * grown by `+=` is a tree of pieces that every later reader (the length, the socket
 * write) must flatten first, which cost as much as writing it.
 */
type MessageWriter = (message: object, parts: string[]) => void;
/** Appends a field's `"name":value` (after a comma unless `first`); false when the field is left out. */
type FieldWriter = (message: Fields, parts: string[], first: boolean) => boolean;
type ValueWriter = (value: unknown) => string;

const compiled = new WeakMap<DescMessage, JsonWriter | null>();

/** The writer of a message type, or null when its answers must go through Protobuf-ES. */
export function jsonWriterOf(schema: DescMessage): JsonWriter | null {
  const known = compiled.get(schema);
  if (known !== undefined) return known;
  const writeMessage = compileMessage(schema, new Map());
  const writer: JsonWriter | null = writeMessage
    ? (message) => {
        const parts: string[] = [];
        writeMessage(message, parts);
        return parts.join('');
      }
    : null;
  compiled.set(schema, writer);
  return writer;
}

/** `pending` holds the writers of the types being compiled, so a recursive type refers to itself. */
function compileMessage(desc: DescMessage, pending: Map<DescMessage, MessageWriter>): MessageWriter | null {
  const known = pending.get(desc);
  if (known !== undefined) return known;
  if (desc.typeName === 'google.protobuf.Timestamp') return (message, parts) => void parts.push(timestampJson(message as TimestampFields));
  if (desc.typeName.startsWith('google.protobuf.')) return null;
  const typeName = desc.typeName;
  const fieldWriters: FieldWriter[] = [];
  const writer: MessageWriter = (message, parts) => {
    if ((message as Fields).$typeName !== typeName) throw new Error(`cannot write ${String((message as Fields).$typeName)} as ${typeName}`);
    parts.push('{');
    let first = true;
    for (const writeField of fieldWriters) if (writeField(message as Fields, parts, first)) first = false;
    parts.push('}');
  };
  pending.set(desc, writer);
  for (const field of [...desc.fields].sort((a, b) => a.number - b.number)) {
    const writeField = compileField(field, pending);
    if (!writeField) return null;
    fieldWriters.push(writeField);
  }
  return writer;
}

function compileField(field: DescField, pending: Map<DescMessage, MessageWriter>): FieldWriter | null {
  if (field.oneof || field.jsonName === '__proto__' || field.presence === FeatureSet_FieldPresence.LEGACY_REQUIRED) return null;
  const key = `${JSON.stringify(field.jsonName)}:`;
  const nextKey = `,${key}`;
  const localName = field.localName;
  switch (field.fieldKind) {
    case 'map':
      return null;
    case 'list': {
      if (field.listKind === 'message') {
        const writeItem = compileMessage(field.message, pending);
        if (!writeItem) return null;
        return (message, parts, first) => {
          const items = message[localName] as object[];
          if (items.length === 0) return false;
          parts.push(first ? key : nextKey, '[');
          for (let i = 0; i < items.length; i++) {
            if (i > 0) parts.push(',');
            writeItem(items[i]!, parts);
          }
          parts.push(']');
          return true;
        };
      }
      const writeItem = field.listKind === 'enum' ? enumWriter(field) : scalarWriter(field.scalar);
      if (!writeItem) return null;
      return (message, parts, first) => {
        const items = message[localName] as unknown[];
        if (items.length === 0) return false;
        parts.push(first ? key : nextKey, '[');
        for (let i = 0; i < items.length; i++) parts.push(i === 0 ? writeItem(items[i]) : `,${writeItem(items[i])}`);
        parts.push(']');
        return true;
      };
    }
    case 'message': {
      const writeMessage = compileMessage(field.message, pending);
      if (!writeMessage) return null;
      return (message, parts, first) => {
        const value = message[localName];
        if (value === undefined || !Object.prototype.hasOwnProperty.call(message, localName)) return false;
        parts.push(first ? key : nextKey);
        writeMessage(value as object, parts);
        return true;
      };
    }
    case 'enum':
    case 'scalar': {
      const writeValue = field.fieldKind === 'enum' ? enumWriter(field) : scalarWriter(field.scalar);
      if (!writeValue) return null;
      if (field.presence !== FeatureSet_FieldPresence.IMPLICIT) {
        return (message, parts, first) => {
          const value = message[localName];
          if (value === undefined || !Object.prototype.hasOwnProperty.call(message, localName)) return false;
          parts.push(first ? key : nextKey, writeValue(value));
          return true;
        };
      }
      const isZero = zeroTest(field);
      return (message, parts, first) => {
        const value = message[localName];
        if (isZero(value)) return false;
        parts.push(first ? key : nextKey, writeValue(value));
        return true;
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

const TIMESTAMP_SECONDS_MIN = Date.parse('0001-01-01T00:00:00Z') / 1000;
const TIMESTAMP_SECONDS_MAX = Date.parse('9999-12-31T23:59:59Z') / 1000;
const SECONDS_PER_DAY = 86_400;
const TWO_DIGITS = Array.from({ length: 60 }, (_, n) => String(n).padStart(2, '0'));

interface TimestampFields {
  $typeName: string;
  seconds: bigint;
  nanos: number;
}

/**
 * `"YYYY-MM-DDT` of a day, from Date's own toISOString: a list's timestamps fall on few
 * days, and formatting each of them through a Date was a tenth of the list's CPU.
 */
const dayPrefixes = new Map<number, string>();
const MAX_DAY_PREFIXES = 4096;

function dayPrefix(day: number): string {
  let prefix = dayPrefixes.get(day);
  if (prefix === undefined) {
    if (dayPrefixes.size >= MAX_DAY_PREFIXES) dayPrefixes.clear();
    prefix = `"${new Date(day * SECONDS_PER_DAY * 1000).toISOString().slice(0, 11)}`;
    dayPrefixes.set(day, prefix);
  }
  return prefix;
}

/**
 * Protobuf-ES's timestampToJson, quoted: the same range checks (years 1 to 9999, nanos
 * 0 to 999,999,999) and the same 0, 3, 6 or 9 digits of fraction.
 */
function timestampJson(message: TimestampFields): string {
  if (message.$typeName !== 'google.protobuf.Timestamp') throw new Error(`cannot write ${message.$typeName} as a timestamp`);
  const seconds = Number(message.seconds);
  if (!(seconds >= TIMESTAMP_SECONDS_MIN && seconds <= TIMESTAMP_SECONDS_MAX)) throw new Error('timestamp out of range');
  const nanos = message.nanos;
  if (!(nanos >= 0 && nanos <= 999_999_999) || !Number.isInteger(nanos)) throw new Error('timestamp nanos out of range');
  let z = 'Z"';
  if (nanos > 0) {
    const digits = (nanos + 1_000_000_000).toString().substring(1);
    if (digits.substring(3) === '000000') z = `.${digits.substring(0, 3)}Z"`;
    else if (digits.substring(6) === '000') z = `.${digits.substring(0, 6)}Z"`;
    else z = `.${digits}Z"`;
  }
  const day = Math.floor(seconds / SECONDS_PER_DAY);
  const time = seconds - day * SECONDS_PER_DAY;
  const hours = Math.floor(time / 3600);
  const minutes = Math.floor((time - hours * 3600) / 60);
  return `${dayPrefix(day)}${TWO_DIGITS[hours]}:${TWO_DIGITS[minutes]}:${TWO_DIGITS[time - hours * 3600 - minutes * 60]}${z}`;
}
