import fc from 'fast-check';
import { create, createFileRegistry, toJsonString, ScalarType, type DescField, type DescMessage, type JsonWriteOptions } from '@bufbuild/protobuf';
import {
  FeatureSet_FieldPresence,
  FieldDescriptorProto_Label as Label,
  FieldDescriptorProto_Type as Type,
  FileDescriptorProtoSchema,
  TimestampSchema,
  file_google_protobuf_timestamp,
} from '@bufbuild/protobuf/wkt';
import { loadConfig } from '../../src/config';
import { createLogger } from '../../src/config/logger';
import { openDatabase, databaseAt } from '../../src/db';
import { build, PUBLIC_SERVICES } from '../../src/server';
import { jsonWriterOf } from '../../src/server/rest/json-writer';
import { ListWebhooksResponseSchema, WebhookDeliverySchema, WebhookEndpointSchema } from '../../src/gen/publishing/v1/webhook_service_pb';
import { TEST_ENV } from '../support/app';
import { createTestDatabase } from '../support/databases';

/**
 * A proto3 message with every field kind the writer claims to know, built from a
 * descriptor here so the equality below covers what this API's own answers do not use yet.
 */
function sampleSchema(): DescMessage {
  const scalars: [string, Type][] = [
    ['text', Type.STRING],
    ['flag', Type.BOOL],
    ['i32', Type.INT32],
    ['s32', Type.SINT32],
    ['sf32', Type.SFIXED32],
    ['u32', Type.UINT32],
    ['f32', Type.FIXED32],
    ['i64', Type.INT64],
    ['s64', Type.SINT64],
    ['sf64', Type.SFIXED64],
    ['u64', Type.UINT64],
    ['f64', Type.FIXED64],
    ['real', Type.DOUBLE],
    ['single', Type.FLOAT],
    ['raw', Type.BYTES],
  ];
  let number = 0;
  const field = (name: string, type: Type, extra: Record<string, unknown> = {}) => ({
    name,
    number: ++number,
    label: Label.OPTIONAL,
    type,
    jsonName: name.replace(/_(\w)/g, (_, c: string) => c.toUpperCase()),
    ...extra,
  });
  const fields = [
    ...scalars.map(([name, type]) => field(name, type)),
    ...scalars.map(([name, type]) => field(`many_${name}`, type, { label: Label.REPEATED })),
    field('kind', Type.ENUM, { typeName: '.sample.Kind' }),
    field('kinds', Type.ENUM, { typeName: '.sample.Kind', label: Label.REPEATED }),
    field('at', Type.MESSAGE, { typeName: '.google.protobuf.Timestamp' }),
    field('ats', Type.MESSAGE, { typeName: '.google.protobuf.Timestamp', label: Label.REPEATED }),
    field('child', Type.MESSAGE, { typeName: '.sample.Sample' }),
    field('children', Type.MESSAGE, { typeName: '.sample.Sample', label: Label.REPEATED }),
    field('maybe_text', Type.STRING, { proto3Optional: true, oneofIndex: 0 }),
    field('maybe_i64', Type.INT64, { proto3Optional: true, oneofIndex: 1 }),
  ];
  const file = create(FileDescriptorProtoSchema, {
    name: 'sample.proto',
    package: 'sample',
    syntax: 'proto3',
    dependency: ['google/protobuf/timestamp.proto'],
    enumType: [{ name: 'Kind', value: [{ name: 'KIND_UNSPECIFIED', number: 0 }, { name: 'KIND_ONE', number: 1 }, { name: 'KIND_TWO', number: 2 }] }],
    messageType: [{ name: 'Sample', field: fields, oneofDecl: [{ name: '_maybe_text' }, { name: '_maybe_i64' }] }],
  });
  const registry = createFileRegistry(file, (name) => (name === 'google/protobuf/timestamp.proto' ? file_google_protobuf_timestamp : undefined));
  const sample = registry.getMessage('sample.Sample');
  if (!sample) throw new Error('sample.Sample not built');
  return sample;
}

const text = fc.oneof(
  fc.constant(''),
  fc.string(),
  fc.string({ unit: 'grapheme' }),
  fc.string({ unit: 'binary' }),
  fc.constantFrom('"quoted" \\ back', '\u2028\u2029', '\ud800', 'é😀', '<script>', '\u0000\u001f\u007f'),
);

const timestamp = fc
  .record({
    seconds: fc.bigInt(-62_135_596_800n, 253_402_300_799n),
    nanos: fc.oneof(fc.constant(0), fc.nat(999).map((ms) => ms * 1_000_000), fc.nat(999_999).map((us) => us * 1_000), fc.nat(999_999_999)),
  })
  .map((init) => create(TimestampSchema, init));

function scalarArbitrary(scalar: ScalarType): fc.Arbitrary<unknown> {
  switch (scalar) {
    case ScalarType.STRING:
      return text;
    case ScalarType.BOOL:
      return fc.boolean();
    case ScalarType.INT32:
    case ScalarType.SINT32:
    case ScalarType.SFIXED32:
      return fc.oneof(fc.constant(0), fc.integer({ min: -(2 ** 31), max: 2 ** 31 - 1 }));
    case ScalarType.UINT32:
    case ScalarType.FIXED32:
      return fc.oneof(fc.constant(0), fc.nat(2 ** 32 - 1));
    case ScalarType.UINT64:
    case ScalarType.FIXED64:
      return fc.oneof(fc.constant(0n), fc.bigInt(0n, 2n ** 64n - 1n));
    case ScalarType.INT64:
    case ScalarType.SINT64:
    case ScalarType.SFIXED64:
      return fc.oneof(fc.constant(0n), fc.bigInt(-(2n ** 63n), 2n ** 63n - 1n));
    case ScalarType.DOUBLE:
    case ScalarType.FLOAT:
      return fc.oneof(fc.constant(0), fc.constant(-0), fc.double(), fc.integer());
    case ScalarType.BYTES:
      return fc.uint8Array({ maxLength: 40 });
  }
}

function valueArbitrary(field: DescField, kind: 'scalar' | 'enum' | 'message', depth: number): fc.Arbitrary<unknown> {
  if (kind === 'enum') return fc.oneof(fc.constantFrom(...field.enum!.values.map((v) => v.number)), fc.integer({ min: -5, max: 99 }));
  if (kind === 'message') return field.message!.typeName === TimestampSchema.typeName ? timestamp : messageArbitrary(field.message!, depth + 1);
  return scalarArbitrary(field.scalar!);
}

/** Any message of the type: each field left unset, at its zero value, or set, nested a few levels. */
function messageArbitrary(desc: DescMessage, depth = 0): fc.Arbitrary<object> {
  const fields: Record<string, fc.Arbitrary<unknown>> = {};
  for (const field of desc.fields) {
    if (field.fieldKind === 'list') {
      fields[field.localName] = depth > 2 && field.listKind === 'message' ? fc.constant([]) : fc.array(valueArbitrary(field, field.listKind, depth), { maxLength: 4 });
    } else if (field.fieldKind === 'scalar' || field.fieldKind === 'enum' || field.fieldKind === 'message') {
      if (field.fieldKind === 'message' && field.message.typeName !== TimestampSchema.typeName && depth > 2) continue;
      fields[field.localName] = valueArbitrary(field, field.fieldKind, depth);
    }
  }
  return fc.record(fields, { requiredKeys: [] }).map((init) => create(desc, init as never));
}

function expectSameJson(desc: DescMessage, runs = 300): void {
  const write = jsonWriterOf(desc);
  if (!write) throw new Error(`no writer for ${desc.typeName}`);
  fc.assert(
    fc.property(messageArbitrary(desc), (message) => {
      expect(write(message)).toBe(toJsonString(desc, message as never));
    }),
    { numRuns: runs },
  );
}

/**
 * Answers holding google.protobuf.Struct (the event catalog's schemas and examples), which the
 * compiled writer does not know: the gateway writes them with Protobuf-ES's own toJsonString.
 */
const PROTOBUF_ES_WRITTEN = new Set(['publishing.v1.ListEventTypesResponse']);

describe('the REST answers JSON writer', () => {
  it('writes every field kind it knows exactly as Protobuf-ES toJsonString does', () => {
    const sample = sampleSchema();
    expect(sample.fields.find((f) => f.localName === 'maybeText')?.presence).toBe(FeatureSet_FieldPresence.EXPLICIT);
    expectSameJson(sample, 500);
  });

  it.each(PUBLIC_SERVICES.map((service) => [service.typeName, service] as const))('writes every answer of %s exactly as Protobuf-ES does', (_, service) => {
    for (const method of service.methods) {
      if (PROTOBUF_ES_WRITTEN.has(method.output.typeName)) expect(jsonWriterOf(method.output)).toBeFalsy();
      else expectSameJson(method.output);
    }
  });

  it('writes the webhook list, the largest answer, exactly as Protobuf-ES does', () => {
    expectSameJson(ListWebhooksResponseSchema, 500);
  });

  it('writes a listed endpoint with unicode, empty and unset fields and extreme instants as Protobuf-ES does', () => {
    const endpoint = create(WebhookEndpointSchema, {
      id: 'e1',
      url: 'https://example.com/höök?q="x"&\u2028',
      description: '',
      eventNames: ['post.published', 'émoji.😀', '\ud83d'],
      createdAt: create(TimestampSchema, { seconds: -62_135_596_800n, nanos: 0 }),
      recentDeliveries: [
        create(WebhookDeliverySchema, {
          id: 'd1',
          attemptCount: 2_147_483_647,
          lastResponseStatus: -1,
          lastError: 'connect ECONNREFUSED\n\t"quoted"',
          createdAt: create(TimestampSchema, { seconds: 253_402_300_799n, nanos: 999_999_999 }),
          updatedAt: create(TimestampSchema, { seconds: 1_700_000_000n, nanos: 120_000 }),
        }),
        create(WebhookDeliverySchema, {}),
      ],
    });
    for (const message of [create(ListWebhooksResponseSchema, {}), create(ListWebhooksResponseSchema, { endpoints: [endpoint, create(WebhookEndpointSchema, {})], nextPageToken: 'eyJ' })]) {
      expect(jsonWriterOf(ListWebhooksResponseSchema)!(message)).toBe(toJsonString(ListWebhooksResponseSchema, message));
    }
  });

  it('refuses what Protobuf-ES refuses, so that the answer goes through Protobuf-ES and fails there as before', () => {
    const write = jsonWriterOf(WebhookEndpointSchema)!;
    const outOfRange = create(WebhookEndpointSchema, { createdAt: create(TimestampSchema, { seconds: 253_402_300_800n }) });
    expect(() => toJsonString(WebhookEndpointSchema, outOfRange)).toThrow();
    expect(() => write(outOfRange)).toThrow();
    const foreign = create(WebhookEndpointSchema, {});
    foreign.recentDeliveries = [create(WebhookEndpointSchema, {}) as never];
    expect(() => toJsonString(WebhookEndpointSchema, foreign)).toThrow();
    expect(() => write(foreign)).toThrow();
  });

  it('leaves to Protobuf-ES the types with kinds it does not know', () => {
    expect(jsonWriterOf(TimestampSchema)).not.toBeNull();
    expect(jsonWriterOf(FileDescriptorProtoSchema)).toBeNull();
  });
});

/** Every option of Protobuf-ES's JSON writer: the compiler fails here when it gains one. */
const JSON_WRITE_OPTIONS: Record<keyof JsonWriteOptions, true> = { alwaysEmitImplicit: true, enumAsInteger: true, useProtoFieldName: true, registry: true };

describe('the router whose REST answers the writer writes', () => {
  it('sets no JSON write option, which connect-es would honour on Connect and the writer would not on REST', async () => {
    const database = await createTestDatabase();
    const orm = await openDatabase(databaseAt(database.url));
    try {
      const app = await build({ config: loadConfig({ ...TEST_ENV, DATABASE_URL: database.url }), orm, logger: createLogger('silent') });
      try {
        expect(Object.keys(app.routerOptions.jsonOptions ?? {}).filter((option) => option in JSON_WRITE_OPTIONS)).toEqual([]);
      } finally {
        await app.close();
      }
    } finally {
      await orm.close();
      await database.drop();
    }
  });
});
