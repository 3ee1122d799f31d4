import { ScalarType, type DescField, type DescMessage } from '@bufbuild/protobuf';
import { FeatureSet_FieldPresence } from '@bufbuild/protobuf/wkt';
import { base64Encode } from '@bufbuild/protobuf/wire';

/**
 * proto3 JSON of a message, for the answers the REST gateway writes.
 *
 * Protobuf-ES's `toJsonString` reflects over every field and formats each timestamp
 * through a Date; for a page of 50 endpoints with 250 deliveries that was a quarter of the
 * list call's CPU (bench/README.md, List), timestamps the largest part. This writer is
 * compiled once per message type from its descriptor into plain functions that build the
 * same JSON value, then one `JSON.stringify` writes it (V8's native writer: a string built
 * piece by piece in JavaScript was slower than the whole of toJsonString). It gives the
 * same text as `toJsonString` with the default options (the router sets no JSON write
 * options; its `jsonOptions` only name a strict text decoder for reading): fields in number
 * order, JSON names, implicit zero values and unset fields left out, 64-bit integers as
 * strings, enums by name, timestamps in RFC 3339 as
 * Protobuf-ES writes them. test/server/json-writer.test.ts holds it to that over
 * generated messages of every public service's answers, and the router to its options.
 *
 * It knows the field kinds this API's answers use; a message type with anything else (a
 * map, a oneof, a well-known type other than Timestamp, a required field) gets no writer,
 * and the gateway writes its answers with Protobuf-ES. A value Protobuf-ES would refuse
 * throws here as it does there.
 */
export type JsonWriter = (message: object) => string;

type Fields = Record<string, unknown>;
type Json = string | number | boolean | null | Json[] | { [key: string]: Json };
/** A message as the JSON value `JSON.stringify` writes: V8's native writer is four times as fast as one in JavaScript. */
type MessageWriter = (message: object) => Json;
/** Sets a field's JSON value on `json`, unless the field is left out. */
type FieldWriter = (message: Fields, json: Record<string, Json>) => void;
type ValueWriter = (value: unknown) => Json;

const compiled = new WeakMap<DescMessage, JsonWriter | null>();

/** The writer of a message type, or null when its answers must go through Protobuf-ES. */
export function jsonWriterOf(schema: DescMessage): JsonWriter | null {
  const known = compiled.get(schema);
  if (known !== undefined) return known;
  const writeMessage = compileMessage(schema, new Map());
  const writer: JsonWriter | null = writeMessage ? (message) => JSON.stringify(writeMessage(message)) : null;
  compiled.set(schema, writer);
  return writer;
}

/** `pending` holds the writers of the types being compiled, so a recursive type refers to itself. */
function compileMessage(desc: DescMessage, pending: Map<DescMessage, MessageWriter>): MessageWriter | null {
  const known = pending.get(desc);
  if (known !== undefined) return known;
  if (desc.typeName === 'google.protobuf.Timestamp') return (message) => timestampJson(message as TimestampFields);
  if (desc.typeName.startsWith('google.protobuf.')) return null;
  const typeName = desc.typeName;
  const fieldWriters: FieldWriter[] = [];
  const writer: MessageWriter = (message) => {
    if ((message as Fields).$typeName !== typeName) throw new Error(`cannot write ${String((message as Fields).$typeName)} as ${typeName}`);
    const json: Record<string, Json> = {};
    for (const writeField of fieldWriters) writeField(message as Fields, json);
    return json;
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
  const key = field.jsonName;
  const localName = field.localName;
  switch (field.fieldKind) {
    case 'map':
      return null;
    case 'list': {
      const writeItem: ValueWriter | null =
        field.listKind === 'message'
          ? (compileMessage(field.message, pending) as ValueWriter | null)
          : field.listKind === 'enum'
            ? enumWriter(field)
            : scalarWriter(field.scalar);
      if (!writeItem) return null;
      return (message, json) => {
        const items = message[localName] as unknown[];
        if (items.length === 0) return;
        const array = new Array<Json>(items.length);
        for (let i = 0; i < items.length; i++) array[i] = writeItem(items[i]);
        json[key] = array;
      };
    }
    case 'message': {
      const writeMessage = compileMessage(field.message, pending);
      if (!writeMessage) return null;
      return (message, json) => {
        const value = message[localName];
        if (value !== undefined && Object.prototype.hasOwnProperty.call(message, localName)) json[key] = writeMessage(value as object);
      };
    }
    case 'enum':
    case 'scalar': {
      const writeValue = field.fieldKind === 'enum' ? enumWriter(field) : scalarWriter(field.scalar);
      if (!writeValue) return null;
      if (field.presence !== FeatureSet_FieldPresence.IMPLICIT) {
        return (message, json) => {
          const value = message[localName];
          if (value !== undefined && Object.prototype.hasOwnProperty.call(message, localName)) json[key] = writeValue(value);
        };
      }
      const isZero = zeroTest(field);
      return (message, json) => {
        const value = message[localName];
        if (!isZero(value)) json[key] = writeValue(value);
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
    return desc.value[value]?.jsonName ?? value;
  };
}

/** A scalar whose proto3 JSON is the value itself, once it is of the JavaScript type its field's is. */
function writtenAsIs(type: 'string' | 'boolean' | 'number'): ValueWriter {
  return (value) => {
    if (typeof value !== type) throw new Error(`expected a ${type}`);
    return value as string | boolean | number;
  };
}

function scalarWriter(scalar: ScalarType | undefined): ValueWriter | null {
  switch (scalar) {
    case ScalarType.STRING:
      return writtenAsIs('string');
    case ScalarType.BOOL:
      return writtenAsIs('boolean');
    case ScalarType.INT32:
    case ScalarType.SINT32:
    case ScalarType.SFIXED32:
    case ScalarType.UINT32:
    case ScalarType.FIXED32:
      return writtenAsIs('number');
    case ScalarType.DOUBLE:
    case ScalarType.FLOAT:
      return (value) => {
        if (typeof value !== 'number') throw new Error('expected a number');
        if (Number.isNaN(value)) return 'NaN';
        if (value === Infinity) return 'Infinity';
        if (value === -Infinity) return '-Infinity';
        return value;
      };
    case ScalarType.INT64:
    case ScalarType.SINT64:
    case ScalarType.SFIXED64:
    case ScalarType.UINT64:
    case ScalarType.FIXED64:
      return (value) => {
        if (typeof value === 'bigint' || typeof value === 'string' || (typeof value === 'number' && Number.isInteger(value))) {
          return value.toString();
        }
        throw new Error('expected an integer');
      };
    case ScalarType.BYTES:
      return (value) => {
        if (!(value instanceof Uint8Array)) throw new Error('expected bytes');
        return base64Encode(value);
      };
    default:
      return null;
  }
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
 * `YYYY-MM-DDT` of a day, from Date's own toISOString: a list's timestamps fall on few
 * days, and formatting each of them through a Date was a tenth of the list's CPU.
 */
const dayPrefixes = new Map<number, string>();
const MAX_DAY_PREFIXES = 4096;

function dayPrefix(day: number): string {
  let prefix = dayPrefixes.get(day);
  if (prefix === undefined) {
    if (dayPrefixes.size >= MAX_DAY_PREFIXES) dayPrefixes.clear();
    prefix = `${new Date(day * SECONDS_PER_DAY * 1000).toISOString().slice(0, 11)}`;
    dayPrefixes.set(day, prefix);
  }
  return prefix;
}

/**
 * Protobuf-ES's timestampToJson: the same range checks (years 1 to 9999, nanos
 * 0 to 999,999,999) and the same 0, 3, 6 or 9 digits of fraction.
 */
function timestampJson(message: TimestampFields): string {
  if (message.$typeName !== 'google.protobuf.Timestamp') throw new Error(`cannot write ${message.$typeName} as a timestamp`);
  const seconds = Number(message.seconds);
  if (!(seconds >= TIMESTAMP_SECONDS_MIN && seconds <= TIMESTAMP_SECONDS_MAX)) throw new Error('timestamp out of range');
  const nanos = message.nanos;
  if (!(nanos >= 0 && nanos <= 999_999_999) || !Number.isInteger(nanos)) throw new Error('timestamp nanos out of range');
  let z = 'Z';
  if (nanos > 0) {
    const digits = (nanos + 1_000_000_000).toString().substring(1);
    if (digits.substring(3) === '000000') z = `.${digits.substring(0, 3)}Z`;
    else if (digits.substring(6) === '000') z = `.${digits.substring(0, 6)}Z`;
    else z = `.${digits}Z`;
  }
  const day = Math.floor(seconds / SECONDS_PER_DAY);
  const time = seconds - day * SECONDS_PER_DAY;
  const hours = Math.floor(time / 3600);
  const minutes = Math.floor((time - hours * 3600) / 60);
  return `${dayPrefix(day)}${TWO_DIGITS[hours]}:${TWO_DIGITS[minutes]}:${TWO_DIGITS[time - hours * 3600 - minutes * 60]}${z}`;
}
