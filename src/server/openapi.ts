import { getOption, ScalarType, type DescEnum, type DescField, type DescMessage, type DescMethod, type DescService } from '@bufbuild/protobuf';
import { access } from '../gen/publishing/v1/access_pb';
import { ERRORS, type ErrorCode } from '../errors';
import pkg from '../../package.json';
import { httpRuleOf, type HttpRule } from './http-rules';

/**
 * The OpenAPI 3.1 document of the REST gateway, derived from the same descriptors the
 * gateway reads at runtime (google.api.http rules, the access option, the messages), so
 * there is no hand-written spec to drift. Schemas follow the proto3 JSON mapping as
 * @bufbuild/protobuf's toJson emits it; toJson omits default values, so no property is
 * required.
 */

type Schema = Record<string, unknown>;

const JSON_CONTENT = 'application/json';
const schemaRef = (name: string): Schema => ({ $ref: `#/components/schemas/${name}` });

export function buildOpenApi(
  services: readonly DescService[],
  info: { title: string; version: string } = { title: pkg.description, version: pkg.version },
): object {
  const schemas: Record<string, Schema> = {};

  /** A message as JSON: a well-known type's own form, or a reference to its component (added on first use). */
  const messageSchema = (message: DescMessage): Schema => {
    const special = wellKnownSchema(message);
    if (special) return special;
    if (!(message.typeName in schemas)) {
      schemas[message.typeName] = {}; // placeholder first: messages may refer to themselves
      const properties = Object.fromEntries(message.fields.map((f) => [f.jsonName, fieldSchema(f)]));
      schemas[message.typeName] = { type: 'object', properties };
    }
    return schemaRef(message.typeName);
  };

  /** One value of a field: the field itself, a list element or a map value. */
  const valueSchema = (value: { scalar?: ScalarType; enum?: DescEnum; message?: DescMessage }): Schema =>
    value.message ? messageSchema(value.message) : value.enum ? enumSchema(value.enum) : scalarSchema(value.scalar ?? ScalarType.STRING);

  const fieldSchema = (field: DescField): Schema => {
    if (field.fieldKind === 'list') return { type: 'array', items: valueSchema(field) };
    // Map keys are JSON object keys, so only the values need a schema.
    if (field.fieldKind === 'map') return { type: 'object', additionalProperties: valueSchema(field) };
    return valueSchema(field);
  };

  const paths: Record<string, Record<string, unknown>> = {};
  for (const service of services) {
    for (const method of service.methods) {
      const route = httpRuleOf(method);
      if (!route) continue;
      const { pathFields } = route;
      const otherFields = method.input.fields.filter((f) => !pathFields.includes(f));
      const parameters = [
        ...pathFields.map((f) => ({ name: f.name, in: 'path', required: true, schema: fieldSchema(f) })),
        // Without a body, the gateway binds the remaining scalar (and repeated scalar) fields from the query.
        ...(route.bodyAll ? [] : otherFields.filter(isQueryField).map((f) => ({ name: f.jsonName, in: 'query', schema: fieldSchema(f) }))),
      ];
      const requestSchema = messageSchema(method.input);
      const comment = commentOf(method);
      (paths[openApiPath(route)] ??= {})[route.verb.toLowerCase()] = {
        operationId: `${service.name}_${method.name}`,
        tags: [service.name],
        summary: comment ? firstSentence(comment) : method.name,
        ...(comment ? { description: comment } : {}),
        security: [{ bearerAuth: [] }],
        'x-permission': getOption(method, access).permission,
        ...(parameters.length > 0 ? { parameters } : {}),
        ...(route.bodyAll
          ? {
              requestBody: {
                content: {
                  [JSON_CONTENT]: {
                    // Path variables overwrite body fields, so the body omits them.
                    schema: pathFields.length === 0 ? requestSchema : { type: 'object', properties: Object.fromEntries(otherFields.map((f) => [f.jsonName, fieldSchema(f)])) },
                  },
                },
              },
            }
          : {}),
        responses: {
          '200': { description: method.output.name, content: { [JSON_CONTENT]: { schema: messageSchema(method.output) } } },
          ...Object.fromEntries(errorStatuses().map((status) => [String(status), { $ref: `#/components/responses/Error${status}` }])),
        },
      };
    }
  }

  return {
    openapi: '3.1.0',
    info,
    tags: services.map((s) => ({ name: s.name })),
    paths,
    components: {
      schemas: { ...schemas, Error: errorSchema() },
      responses: Object.fromEntries(errorStatuses().map((status) => [`Error${status}`, errorResponse(status)])),
      securitySchemes: { bearerAuth: { type: 'http', scheme: 'bearer' } },
    },
  };
}

/** The OpenAPI path of a rule: `{name=*}` variables written as `{name}`. */
function openApiPath(rule: HttpRule): string {
  return rule.segments.map((segment) => (typeof segment === 'string' ? segment : `{${segment.name}}`)).join('/');
}

function isQueryField(field: DescField): boolean {
  return field.fieldKind === 'scalar' || field.fieldKind === 'enum' || (field.fieldKind === 'list' && field.listKind !== 'message');
}

function scalarSchema(scalar: ScalarType): Schema {
  switch (scalar) {
    case ScalarType.STRING:
      return { type: 'string' };
    case ScalarType.BOOL:
      return { type: 'boolean' };
    case ScalarType.BYTES:
      return { type: 'string', contentEncoding: 'base64' };
    case ScalarType.INT32:
    case ScalarType.SINT32:
    case ScalarType.SFIXED32:
      return { type: 'integer', format: 'int32' };
    case ScalarType.UINT32:
    case ScalarType.FIXED32:
      return { type: 'integer', minimum: 0, maximum: 0xffffffff };
    // 64-bit integers do not fit a JSON number, so toJson writes them as decimal strings.
    case ScalarType.INT64:
    case ScalarType.SINT64:
    case ScalarType.SFIXED64:
      return { type: 'string', pattern: '^-?[0-9]+$' };
    case ScalarType.UINT64:
    case ScalarType.FIXED64:
      return { type: 'string', pattern: '^[0-9]+$' };
    case ScalarType.FLOAT:
    case ScalarType.DOUBLE:
      // Non-finite values have no JSON number; toJson writes them as these strings.
      return { anyOf: [{ type: 'number' }, { type: 'string', enum: ['NaN', 'Infinity', '-Infinity'] }] };
  }
}

function enumSchema(desc: DescEnum): Schema {
  if (desc.typeName === 'google.protobuf.NullValue') return { type: 'null' };
  return { type: 'string', enum: desc.values.map((v) => v.name) };
}

/** Well-known types with a JSON form of their own; null for ordinary messages. */
function wellKnownSchema(message: DescMessage): Schema | null {
  if (message.file.name === 'google/protobuf/wrappers') {
    const [value] = message.fields;
    return value?.fieldKind === 'scalar' ? scalarSchema(value.scalar) : null;
  }
  switch (message.typeName) {
    case 'google.protobuf.Timestamp':
      return { type: 'string', format: 'date-time' };
    case 'google.protobuf.Duration':
      return { type: 'string', pattern: '^-?[0-9]+(\\.[0-9]{1,9})?s$' };
    case 'google.protobuf.FieldMask':
      return { type: 'string' };
    case 'google.protobuf.Struct':
      return { type: 'object' };
    case 'google.protobuf.ListValue':
      return { type: 'array' };
    case 'google.protobuf.Value':
      return {};
    case 'google.protobuf.Any':
      return { type: 'object', properties: { '@type': { type: 'string' } }, required: ['@type'] };
    default:
      return null;
  }
}

/**
 * The method's leading comment, when the descriptor carries source code info. The
 * embedded descriptors of protoc-gen-es do not (it strips it), so this is empty for
 * src/gen and the summary falls back to the method name.
 */
function commentOf(method: DescMethod): string {
  const service = method.parent;
  const path = [6 /* services */, service.file.services.indexOf(service), 2 /* methods */, service.methods.indexOf(method)];
  const location = service.file.proto.sourceCodeInfo?.location.find((l) => l.path.length === path.length && l.path.every((p, i) => p === path[i]));
  return (location?.leadingComments ?? '').replace(/\s+/g, ' ').trim();
}

function firstSentence(text: string): string {
  return /^.*?\.(?=\s|$)/.exec(text)?.[0] ?? text;
}

/** Every HTTP status the ERRORS catalog can answer, ascending. */
function errorStatuses(): number[] {
  return [...new Set(Object.values(ERRORS).map(([, status]) => status as number))].sort((a, b) => a - b);
}

function codesOf(status: number): ErrorCode[] {
  return (Object.keys(ERRORS) as ErrorCode[]).filter((code) => ERRORS[code][1] === status);
}

function errorSchema(): Schema {
  return {
    type: 'object',
    properties: {
      code: { type: 'string', enum: Object.keys(ERRORS) },
      message: { type: 'string' },
      requestId: { type: 'string' },
      details: { type: 'object', additionalProperties: { type: 'string' } },
    },
    required: ['code', 'message'],
  };
}

/** The error body of one status, its code narrowed to the codes the catalog answers with that status. */
function errorResponse(status: number): Schema {
  const codes = codesOf(status);
  return {
    description: codes.join(', '),
    content: { [JSON_CONTENT]: { schema: { ...schemaRef('Error'), type: 'object', properties: { code: { enum: codes } } } } },
  };
}
