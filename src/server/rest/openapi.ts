import { getOption, ScalarType, type DescEnum, type DescField, type DescMessage, type DescMethod, type DescService } from '@bufbuild/protobuf';
import { access } from '../../gen/publishing/v1/access_pb';
import { ERRORS, type ErrorCode } from '../../errors';
import pkg from '../../../package.json';
import { httpRuleOf, type HttpRule } from './http-rules';

/**
 * The OpenAPI 3.1 document of the REST gateway, derived from the same descriptors the
 * gateway reads at runtime (google.api.http rules, the access option, the messages), so
 * there is no hand-written spec to drift. Schemas follow the proto3 JSON mapping as
 * @bufbuild/protobuf's toJson emits it; toJson omits default values, so no property is
 * required.
 *
 * Descriptions are the proto's own comments, where the descriptors carry source code info:
 * scripts/generate-openapi.ts builds them with `buf build`, which keeps it. The descriptors
 * embedded in src/gen do not (protoc-gen-es strips it), so a document built from those has
 * no descriptions and operations summarized by their RPC names.
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
      schemas[message.typeName] = { type: 'object', ...described(message), properties };
    }
    return schemaRef(message.typeName);
  };

  /** One value of a field: the field itself, a list element or a map value. */
  const valueSchema = (value: { scalar?: ScalarType; enum?: DescEnum; message?: DescMessage }): Schema =>
    value.message ? messageSchema(value.message) : value.enum ? enumSchema(value.enum) : scalarSchema(value.scalar ?? ScalarType.STRING);

  const fieldSchema = (field: DescField): Schema => {
    if (field.fieldKind === 'list') return { type: 'array', ...described(field), items: valueSchema(field) };
    // Map keys are JSON object keys, so only the values need a schema.
    if (field.fieldKind === 'map') return { type: 'object', ...described(field), additionalProperties: valueSchema(field) };
    return { ...valueSchema(field), ...described(field) };
  };

  const paths: Record<string, Record<string, unknown>> = {};
  for (const service of services) {
    for (const method of service.methods) {
      const route = httpRuleOf(method);
      if (!route) continue;
      const { pathFields } = route;
      const otherFields = method.input.fields.filter((f) => !pathFields.includes(f));
      const parameters = [
        ...pathFields.map((f) => ({ name: f.name, in: 'path', ...described(f), required: true, schema: fieldSchema(f) })),
        // Without a body, the gateway binds the remaining scalar (and repeated scalar) fields from the query.
        ...(route.bodyAll ? [] : otherFields.filter(isQueryField).map((f) => ({ name: f.jsonName, in: 'query', ...described(f), schema: fieldSchema(f) }))),
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
                    schema:
                      pathFields.length === 0
                        ? requestSchema
                        : { type: 'object', ...described(method.input), properties: Object.fromEntries(otherFields.map((f) => [f.jsonName, fieldSchema(f)])) },
                  },
                },
              },
            }
          : {}),
        responses: {
          '200': { description: commentOf(method.output) || method.output.name, content: { [JSON_CONTENT]: { schema: messageSchema(method.output) } } },
          ...Object.fromEntries(errorStatuses().map((status) => [String(status), { $ref: `#/components/responses/Error${status}` }])),
        },
      };
    }
  }

  return {
    openapi: '3.1.0',
    info,
    tags: services.map((s) => ({ name: s.name, ...described(s) })),
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

type Commented = DescService | DescMethod | DescMessage | DescField | DescEnum;

/** `{ description }` with the element's comment, or nothing when it has none. */
function described(desc: Commented): { description?: string } {
  const comment = commentOf(desc);
  return comment ? { description: comment } : {};
}

/** The element's leading comment as one paragraph; empty when the descriptor carries no source code info. */
function commentOf(desc: Commented): string {
  const path = sourcePath(desc);
  const file = desc.kind === 'field' || desc.kind === 'rpc' ? desc.parent.file : desc.file;
  const location = file.proto.sourceCodeInfo?.location.find((l) => l.path.length === path.length && l.path.every((p, i) => p === path[i]));
  return (location?.leadingComments ?? '').replace(/\s+/g, ' ').trim();
}

/** Where an element is declared in its FileDescriptorProto: the path of its SourceCodeInfo location. */
function sourcePath(desc: Commented): number[] {
  switch (desc.kind) {
    case 'service':
      return [6 /* service */, desc.file.proto.service.indexOf(desc.proto)];
    case 'rpc':
      return [...sourcePath(desc.parent), 2 /* method */, desc.parent.proto.method.indexOf(desc.proto)];
    case 'message':
      return desc.parent
        ? [...sourcePath(desc.parent), 3 /* nested_type */, desc.parent.proto.nestedType.indexOf(desc.proto)]
        : [4 /* message_type */, desc.file.proto.messageType.indexOf(desc.proto)];
    case 'enum':
      return desc.parent
        ? [...sourcePath(desc.parent), 4 /* enum_type */, desc.parent.proto.enumType.indexOf(desc.proto)]
        : [5 /* enum_type */, desc.file.proto.enumType.indexOf(desc.proto)];
    case 'field':
      return [...sourcePath(desc.parent), 2 /* field */, desc.parent.proto.field.indexOf(desc.proto)];
  }
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
    description: 'A refused or failed call. gRPC and Connect carry the same code as the reason of a google.rpc.ErrorInfo detail.',
    properties: {
      code: { type: 'string', description: 'The stable machine code of the error; clients branch on it.', enum: Object.keys(ERRORS) },
      message: { type: 'string', description: 'What went wrong, for people; not stable.' },
      requestId: { type: 'string', description: 'Id of the request, also in the x-request-id header and the service log.' },
      details: { type: 'object', description: 'Facts of the error by name (the ErrorInfo metadata).', additionalProperties: { type: 'string' } },
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
