import { readFileSync } from 'node:fs';
import path from 'node:path';
import { randomUUID } from 'node:crypto';
import Ajv2020, { type ValidateFunction } from 'ajv/dist/2020';
import addFormats from 'ajv-formats';
import { clone, create, createFileRegistry, type DescFile } from '@bufbuild/protobuf';
import { FileDescriptorProtoSchema, SourceCodeInfoSchema, file_google_protobuf_timestamp } from '@bufbuild/protobuf/wkt';
import { buildOpenApi } from '../../src/server/rest/openapi';
import { PUBLIC_SERVICES } from '../../src/server';
import { ERRORS } from '../../src/errors';
import { file_google_api_annotations } from '../../src/gen/google/api/annotations_pb';
import { file_publishing_v1_access } from '../../src/gen/publishing/v1/access_pb';
import { file_publishing_v1_webhook_service } from '../../src/gen/publishing/v1/webhook_service_pb';
import { generatedOpenApi } from '../../scripts/openapi-document';
import { startTestApp, type TestApp, type Tenant } from '../support/app';
import { rest } from '../support/clients';
import { approveSandboxAccount } from '../support/connections';

type Json = Record<string, any>;
interface Operation {
  operationId: string;
  parameters?: { name: string; in: string; required?: boolean }[];
  responses: Record<string, Json>;
  [key: string]: unknown;
}
interface OpenApi {
  openapi: string;
  info: { title: string; version: string };
  tags: { name: string; description?: string }[];
  paths: Record<string, Record<string, Operation>>;
  components: { schemas: Record<string, Json>; responses: Record<string, Json>; securitySchemes: Record<string, Json> };
}

const GENERATED = path.resolve(__dirname, '../../src/gen/openapi.json');
/** The document as `npm run generate` builds it: from `buf build` descriptors, which keep the proto comments. */
const doc = generatedOpenApi() as OpenApi;
const operations = Object.entries(doc.paths).flatMap(([template, item]) =>
  Object.entries(item).map(([verb, operation]) => ({ verb: verb.toUpperCase(), template, operation })),
);

/** Every `$ref` anywhere in a value. */
function refsIn(value: unknown): string[] {
  if (Array.isArray(value)) return value.flatMap(refsIn);
  if (typeof value !== 'object' || value === null) return [];
  return Object.entries(value).flatMap(([key, v]) => (key === '$ref' && typeof v === 'string' ? [v] : refsIn(v)));
}

function atPointer(root: unknown, ref: string): unknown {
  if (!ref.startsWith('#/')) return undefined;
  return ref
    .slice(2)
    .split('/')
    .map((part) => part.replace(/~1/g, '/').replace(/~0/g, '~'))
    .reduce<any>((node, part) => (node === undefined ? undefined : node[part]), root);
}

const SPEC_ID = 'https://openapi.invalid/openapi.json';

/**
 * Validators for the document's schemas, by JSON pointer. The document leaves objects open
 * so a newer server's fields do not break clients; this server's own answers must use
 * exactly the documented properties, so the copy given to ajv closes every message schema.
 */
function validatorsFor(document: OpenApi): (pointer: string) => ValidateFunction {
  const closed = structuredClone(document);
  for (const schema of Object.values(closed.components.schemas)) {
    if (schema.properties) schema.additionalProperties = false;
  }
  const ajv = new Ajv2020({ allErrors: true, strict: true });
  addFormats(ajv);
  // The OpenAPI keywords around the schemas; ajv only has to walk through them to resolve $refs.
  ajv.addVocabulary(['openapi', 'info', 'tags', 'paths', 'components']);
  ajv.addSchema({ ...closed, $id: SPEC_ID });
  return (pointer) => {
    const validate = ajv.getSchema(`${SPEC_ID}#${pointer}`);
    if (!validate) throw new Error(`no schema at ${pointer}`);
    return validate;
  };
}
const validatorAt = validatorsFor(doc);

const escape = (part: string) => encodeURIComponent(part.replace(/~/g, '~0').replace(/\//g, '~1'));

/** The schema of an operation's response body for a status, following a shared response's $ref. */
function responseValidator(verb: string, template: string, status: number): ValidateFunction {
  const response = doc.paths[template]?.[verb.toLowerCase()]?.responses[String(status)];
  if (!response) throw new Error(`${verb} ${template} documents no ${status} response`);
  const at = typeof response.$ref === 'string' ? response.$ref.slice(1) : `/paths/${escape(template)}/${verb.toLowerCase()}/responses/${status}`;
  return validatorAt(`${at}/content/application~1json/schema`);
}

function errorsOf(validate: ValidateFunction, body: unknown): unknown[] {
  return validate(body) ? [] : (validate.errors ?? []).map((e) => `${e.instancePath} ${e.message}`);
}

describe('the generated document', () => {
  it('has the shape of an OpenAPI 3.1 document', () => {
    expect(doc.openapi).toBe('3.1.0');
    expect(doc.info).toEqual({ title: expect.any(String), version: expect.stringMatching(/^\d+\.\d+\.\d+/) });
    expect(operations.length).toBeGreaterThan(0);
    expect(new Set(operations.map((o) => o.operation.operationId)).size).toBe(operations.length);
    for (const { verb, template, operation } of operations) {
      const where = `${verb} ${template}`;
      const placeholders = [...template.matchAll(/\{([^}]+)\}/g)].map((m) => m[1]);
      const pathParams = (operation.parameters ?? []).filter((p) => p.in === 'path');
      expect({ where, params: pathParams.map((p) => [p.name, p.required]) }).toEqual({ where, params: placeholders.map((p) => [p, true]) });
      expect({ where, security: operation.security }).toEqual({ where, security: [{ bearerAuth: [] }] });
      expect({ where, permission: operation['x-permission'] }).toEqual({ where, permission: expect.stringMatching(/^[a-z]+:[a-z]+$/) });
      expect({ where, statuses: Object.keys(operation.responses).filter((s) => !/^[1-5]\d\d$/.test(s)) }).toEqual({ where, statuses: [] });
      expect(operation.responses['200']).toBeDefined();
    }
    expect(doc.components.securitySchemes.bearerAuth).toMatchObject({ type: 'http', scheme: 'bearer' });
    expect(doc.components.schemas.Error?.properties.code.enum).toEqual(Object.keys(ERRORS));
    expect(doc.components.schemas.Error?.required).toEqual(['code', 'message']);
  });

  it('resolves every $ref', () => {
    const refs = [...new Set(refsIn(doc))];
    expect(refs.length).toBeGreaterThan(0);
    expect(refs.filter((ref) => atPointer(doc, ref) === undefined)).toEqual([]);
  });

  it('has component schemas that compile as JSON Schema 2020-12 in strict mode', () => {
    for (const name of Object.keys(doc.components.schemas)) {
      expect(() => validatorAt(`/components/schemas/${escape(name)}`)).not.toThrow();
    }
  });

  it('maps proto3 JSON as toJson writes it', () => {
    const schemas = doc.components.schemas;
    const described = expect.any(String);
    expect(schemas['publishing.v1.StartConnectionResponse']).toEqual({
      type: 'object',
      description: described,
      properties: {
        redirectUrl: { type: 'string', description: described },
        state: { type: 'string', description: described },
        expiresAt: { type: 'string', format: 'date-time', description: described },
      },
    });
    expect(schemas['publishing.v1.WebhookEndpoint']?.properties).toMatchObject({
      eventNames: { type: 'array', items: { type: 'string' } },
      disabled: { type: 'boolean' },
      recentDeliveries: { type: 'array', items: { $ref: '#/components/schemas/publishing.v1.WebhookDelivery' } },
    });
    expect(schemas['publishing.v1.WebhookDelivery']?.properties.attemptCount).toEqual({ type: 'integer', format: 'int32', description: described });
    // toJson leaves out default values, so nothing can be required.
    expect(Object.values(schemas).filter((s) => s.required && s !== schemas.Error)).toEqual([]);
  });

  it('binds query parameters on body-less routes and leaves path fields out of bodies', () => {
    const described = expect.any(String);
    expect(doc.paths['/api/v1/connections']?.get?.parameters).toEqual([
      { name: 'pageSize', in: 'query', description: described, schema: { type: 'integer', format: 'int32', description: described } },
      { name: 'pageToken', in: 'query', description: described, schema: { type: 'string', description: described } },
    ]);
    const confirm = doc.paths['/api/v1/connections/{id}/confirm']?.post as Json;
    expect(confirm.requestBody.content['application/json'].schema).toEqual({
      type: 'object',
      description: described,
      properties: { confirmIdentity: { type: 'boolean', description: described } },
    });
    expect(doc.paths['/api/v1/webhooks']?.post?.requestBody).toEqual({
      content: { 'application/json': { schema: { $ref: '#/components/schemas/publishing.v1.CreateWebhookRequest' } } },
    });
  });

  it('takes summary and description from the proto comments when the descriptors carry them', () => {
    // protoc-gen-es strips source code info; put a comment back on ListWebhooks (service 0, method 0).
    const proto = clone(FileDescriptorProtoSchema, file_publishing_v1_webhook_service.proto);
    proto.sourceCodeInfo = create(SourceCodeInfoSchema, {
      location: [{ path: [6, 0, 2, 0], leadingComments: ' Lists the endpoints.\n Secrets are never included.\n' }],
    });
    const deps: DescFile[] = [file_google_api_annotations, file_google_protobuf_timestamp, file_publishing_v1_access];
    const registry = createFileRegistry(proto, (name) => deps.find((f) => f.proto.name === name));
    const service = registry.getService('publishing.v1.WebhookService');
    if (!service) throw new Error('WebhookService missing from the registry');
    const withComments = buildOpenApi([service]) as OpenApi;
    expect(withComments.paths['/api/v1/webhooks']?.get).toMatchObject({
      summary: 'Lists the endpoints.',
      description: 'Lists the endpoints. Secrets are never included.',
    });
    // Without source code info the summary is the method name and there is no description.
    expect(withComments.paths['/api/v1/webhooks']?.post).toMatchObject({ summary: 'CreateWebhook' });
    expect(withComments.paths['/api/v1/webhooks']?.post?.description).toBeUndefined();
  });

  it('describes every operation, parameter, schema and field with its proto comment', () => {
    const undescribed: string[] = [];
    for (const { verb, template, operation } of operations) {
      const where = `${verb} ${template}`;
      const description = operation.description as string | undefined;
      if (!description) undescribed.push(`${where}: description`);
      // The summary is the comment's first sentence, never the RPC's name.
      if (!description || !description.startsWith(operation.summary as string) || operation.summary === operation.operationId.split('_')[1]) undescribed.push(`${where}: summary`);
      for (const parameter of operation.parameters ?? []) {
        if (!(parameter as Json).description) undescribed.push(`${where}: parameter ${parameter.name}`);
      }
      if (!operation.responses['200']?.description) undescribed.push(`${where}: 200 response`);
    }
    for (const [name, schema] of Object.entries(doc.components.schemas)) {
      if (!schema.description) undescribed.push(`schema ${name}`);
      for (const [field, property] of Object.entries<Json>(schema.properties ?? {})) {
        if (!property.description) undescribed.push(`schema ${name}: ${field}`);
      }
    }
    for (const [name, response] of Object.entries(doc.components.responses)) {
      if (!response.description) undescribed.push(`response ${name}`);
    }
    expect(undescribed).toEqual([]);
  });

  it("carries the proto's own words", () => {
    const pause = doc.paths['/api/v1/webhooks/{id}/pause']?.post as Json;
    expect(pause.summary).toBe('Pauses an active endpoint: its deliveries, in flight and new, are recorded and held without using an attempt until it is resumed.');
    expect(pause.description).toMatch(/^Pauses an active endpoint: .* Publishes webhook\.endpoint\.paused to the organization's other endpoints subscribed to it\.$/);
    expect(pause.parameters).toEqual([{ name: 'id', in: 'path', description: "Id of one of the organization's endpoints.", required: true, schema: expect.any(Object) }]);
    expect(doc.components.schemas['publishing.v1.WebhookEndpoint']?.properties.url.description).toBe('https URL deliveries are POSTed to.');
    expect(doc.tags.find((tag) => tag.name === 'WebhookService')?.description).toMatch(/^Registers HTTPS webhook endpoints/);
  });

  it('documents the routes of the services the server serves', () => {
    const served = buildOpenApi(PUBLIC_SERVICES) as OpenApi;
    const routes = (d: OpenApi) => Object.entries(d.paths).flatMap(([template, item]) => Object.entries(item).map(([verb, op]) => `${verb} ${template} ${op.operationId}`));
    expect(routes(doc).sort()).toEqual(routes(served).sort());
  });

  it('matches src/gen/openapi.json (regenerate with npm run generate)', () => {
    expect(JSON.parse(readFileSync(GENERATED, 'utf8'))).toEqual(doc);
  });

  it('rejects bodies that break the schemas', () => {
    const list = responseValidator('GET', '/api/v1/connections', 200);
    expect(errorsOf(list, {})).toEqual([]);
    expect(errorsOf(list, { connections: [{ id: 7 }] })).not.toEqual([]);
    expect(errorsOf(list, { next_page_token: 'x' })).not.toEqual([]); // proto field name instead of the JSON name
    expect(errorsOf(list, { connections: [{ createdAt: 'yesterday' }] })).not.toEqual([]);
    expect(errorsOf(list, { connectableToolkits: 'instagram' })).not.toEqual([]);

    const refused = responseValidator('POST', '/api/v1/connections/start', 422);
    expect(errorsOf(refused, { code: 'CAPABILITY_UNSUPPORTED', message: 'no', details: { toolkit: 'tiktok' } })).toEqual([]);
    expect(errorsOf(refused, { code: 'NOT_FOUND', message: 'no' })).not.toEqual([]); // a 404 code on a 422
    expect(errorsOf(refused, { code: 'CAPABILITY_UNSUPPORTED' })).not.toEqual([]); // no message
    expect(errorsOf(refused, { code: 'CAPABILITY_UNSUPPORTED', message: 'no', details: { n: 1 } })).not.toEqual([]);
  });
});

describe('the served REST API', () => {
  let t: TestApp;
  let tenant: Tenant;
  beforeAll(async () => {
    t = await startTestApp();
    tenant = await t.tenant();
  });
  afterAll(async () => t?.close());

  it('documents exactly the routes the gateway derives', () => {
    const derived = t.app.gateway
      .describe()
      .map((r) => `${r.verb} ${r.template.replace(/=\*\}/g, '}')} ${r.method.parent.name}_${r.method.name}`);
    const documented = operations.map((o) => `${o.verb} ${o.template} ${o.operation.operationId}`);
    expect(documented.sort()).toEqual(derived.sort());
  });

  /** Operations a real call answered with 200. */
  const answered = new Set<string>();

  /** A real REST call whose body must validate against the document's schema for its status. */
  async function call(
    verb: string,
    template: string,
    expected: number,
    options: { params?: Record<string, string>; query?: string; body?: unknown; apiKey?: string | null } = {},
  ): Promise<Json> {
    const url = template.replace(/\{(\w+)\}/g, (_, name: string) => encodeURIComponent(options.params?.[name] ?? ''));
    const apiKey = options.apiKey === null ? undefined : (options.apiKey ?? tenant.apiKey);
    const res = await rest(t.url, verb, `${url}${options.query ?? ''}`, { apiKey, body: options.body });
    const where = `${verb} ${url} -> ${res.status} ${JSON.stringify(res.body)}`;
    expect({ where, status: res.status }).toEqual({ where, status: expected });
    expect({ where, errors: errorsOf(responseValidator(verb, template, res.status), res.body) }).toEqual({ where, errors: [] });
    if (res.status === 200) answered.add(`${verb} ${template}`);
    return res.body as Json;
  }

  it('answers every route with a body its schema accepts', async () => {
    const future = new Date(Date.now() + 86_400_000).toISOString();

    const started = await call('POST', '/api/v1/connections/start', 200, { body: { toolkit: 'instagram' } });
    const connectedAccountId = await approveSandboxAccount(t.url, started.redirectUrl as string, 'bakery');
    const completed = await call('POST', '/api/v1/connections/complete', 200, { body: { state: started.state, connectedAccountId } });
    const id = completed.connection.id as string;
    await call('POST', '/api/v1/connections/{id}/confirm', 200, { params: { id }, body: { confirmIdentity: true } });
    const listed = await call('GET', '/api/v1/connections', 200, { query: '?pageSize=10' });
    expect(listed.connections).toHaveLength(1);
    expect(listed.connections[0]).toMatchObject({ identity: expect.any(Object), verifiedAt: expect.any(String) });

    await call('POST', '/api/v1/posts', 200, { body: { connectionId: id, text: 'hello', scheduledAt: future } });
    expect((await call('GET', '/api/v1/posts', 200)).posts).toHaveLength(1);
    // Nothing is held yet: toJson leaves releasedPosts (0) out, an empty object.
    expect(await call('POST', '/api/v1/connections/{connection_id}/release', 200, { params: { connection_id: id } })).toEqual({});
    await call('POST', '/api/v1/connections/{id}/disable', 200, { params: { id }, body: { reason: 'rebrand' } });

    const created = await call('POST', '/api/v1/webhooks', 200, { body: { url: 'https://127.0.0.1:9/hook', description: 'openapi' } });
    const webhookId = created.endpoint.id as string;
    await call('POST', '/api/v1/webhooks/{id}/test', 200, { params: { id: webhookId } });
    const rotated = await call('POST', '/api/v1/webhooks/{id}/rotate-secret', 200, { params: { id: webhookId }, body: { overlapSeconds: 60 } });
    expect(rotated.endpoint.secretRotation).toMatchObject({ previousSignatureScheme: 'legacy' });
    await call('PATCH', '/api/v1/webhooks/{id}', 200, { params: { id: webhookId }, body: { description: 'renamed' } });
    const webhooks = await call('GET', '/api/v1/webhooks', 200);
    expect(webhooks.endpoints[0].recentDeliveries).toHaveLength(1);
    expect(webhooks.endpoints[0]).toMatchObject({ description: 'renamed', signatureScheme: 'legacy', secretRotation: rotated.endpoint.secretRotation });
    expect((await call('POST', '/api/v1/webhooks/{id}/pause', 200, { params: { id: webhookId } })).endpoint.state).toBe('paused');
    expect((await call('POST', '/api/v1/webhooks/{id}/resume', 200, { params: { id: webhookId } })).endpoint.state).toBe('active');
    const deliveryId = webhooks.endpoints[0].recentDeliveries[0].id as string;
    expect((await call('GET', '/api/v1/webhooks/{id}/deliveries', 200, { params: { id: webhookId }, query: '?pageSize=5' })).deliveries).toHaveLength(1);
    await call('GET', '/api/v1/webhooks/{id}/deliveries/{delivery_id}', 200, { params: { id: webhookId, delivery_id: deliveryId } });
    // Dead-lettered below the API: its eight attempts 30 s apart are not this test's subject.
    await t.orm.em.fork().execute("update webhook_deliveries set status = 'dead_lettered', next_attempt_at = null where id = ?", [deliveryId]);
    await call('POST', '/api/v1/webhooks/{id}/deliveries/{delivery_id}/resend', 200, { params: { id: webhookId, delivery_id: deliveryId }, body: {} });
    const since = new Date(Date.now() - 3_600_000).toISOString();
    const recovery = await call('POST', '/api/v1/webhooks/{id}/recover', 200, { params: { id: webhookId }, body: { since } });
    await call('GET', '/api/v1/webhooks/{id}/recoveries/{job_id}', 200, { params: { id: webhookId, job_id: recovery.recovery.id } });
    await call('DELETE', '/api/v1/webhooks/{id}', 200, { params: { id: webhookId } });

    // A route added later needs a call here too.
    expect([...answered].sort()).toEqual(operations.map((o) => `${o.verb} ${o.template}`).sort());
  });

  it('answers refusals with bodies their status schema accepts', async () => {
    const gated = await call('POST', '/api/v1/connections/start', 422, { body: { toolkit: 'tiktok' } });
    expect(gated.code).toBe('CAPABILITY_UNSUPPORTED');
    expect((await call('DELETE', '/api/v1/webhooks/{id}', 404, { params: { id: randomUUID() } })).code).toBe('WEBHOOK_NOT_FOUND');
    expect((await call('POST', '/api/v1/connections/{id}/confirm', 404, { params: { id: randomUUID() }, body: { confirmIdentity: true } })).code).toBe('CONNECTION_NOT_FOUND');
    expect((await call('GET', '/api/v1/connections', 401, { apiKey: null })).code).toBe('AUTHENTICATION_REQUIRED');
    expect((await call('POST', '/api/v1/webhooks', 400, { body: { url: 'http://127.0.0.1:9/hook' } })).code).toBe('WEBHOOK_URL_NOT_HTTPS');
    const endpoint = (await call('POST', '/api/v1/webhooks', 200, { body: { url: 'https://127.0.0.1:9/hook' } })).endpoint.id as string;
    expect((await call('POST', '/api/v1/webhooks/{id}/rotate-secret', 400, { params: { id: endpoint }, body: { overlapSeconds: -1 } })).code).toBe('ROTATION_OVERLAP_INVALID');
    await call('POST', '/api/v1/webhooks/{id}/rotate-secret', 200, { params: { id: endpoint }, body: {} });
    expect((await call('PATCH', '/api/v1/webhooks/{id}', 409, { params: { id: endpoint }, body: { signatureScheme: 'both' } })).code).toBe('SECRET_ROTATION_IN_PROGRESS');
    expect((await call('PATCH', '/api/v1/webhooks/{id}', 400, { params: { id: endpoint }, body: { signatureScheme: 'hmac' } })).code).toBe('SIGNATURE_SCHEME_INVALID');
    const viewer = await t.tenant({ role: 'viewer' });
    expect((await call('GET', '/api/v1/webhooks', 403, { apiKey: viewer.apiKey })).code).toBe('PERMISSION_DENIED');
  });
});

describe('GET /api/v1/openapi.json', () => {
  it('serves the generated document without a key', async () => {
    const t = await startTestApp();
    try {
      const res = await fetch(`${t.url}/api/v1/openapi.json`);
      expect(res.status).toBe(200);
      expect(await res.json()).toEqual(JSON.parse(readFileSync(GENERATED, 'utf8')));
    } finally {
      await t.close();
    }
  });
});
