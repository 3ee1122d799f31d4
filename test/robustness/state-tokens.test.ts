/**
 * The signed state of a connection attempt under every kind of tampering, generated:
 * bit flips, truncation, appended bytes, re-signing with a wrong key (as is or with
 * edited fields), base64 alphabet swaps, whitespace, other versions. Each completion is
 * refused with STATE_INVALID on REST and gRPC; edits signed with the real key get the
 * refusal their content calls for. Nothing is consumed: afterwards the right person
 * completes the attempt with the original state.
 */
import { createHmac, randomUUID } from 'node:crypto';
import fc from 'fast-check';
import { StateSigner, type StatePayload } from '../../src/connections/state';
import { startTestApp, type TestApp, type Tenant } from '../support/app';
import { approveSandboxAccount } from '../support/connections';
import { REFUSALS, Refusal, connectionsApi, rows, type ConnectionsApi, type RefusalCode, type TransportUnderTest } from '../connections/flow-helpers';
import { inPool, snapshotDomain, ROBUSTNESS_SEED } from './support';

const MUTATIONS = 1_500;
const ACCOUNT = 'sbx.instagram.bakery';

let t: TestApp;
let owner: Tenant;
let colleague: { userId: string; apiKey: string };
let stranger: Tenant;
let apis: Record<TransportUnderTest, ConnectionsApi>;

beforeAll(async () => {
  t = await startTestApp();
  owner = await t.tenant({ role: 'owner' });
  colleague = await owner.colleague('admin');
  stranger = await t.tenant({ role: 'owner' });
  apis = { rest: connectionsApi(t, 'rest'), grpc: connectionsApi(t, 'grpc') };
});
afterAll(async () => {
  await t?.close();
});

interface Token {
  version: string;
  body: string;
  mac: string;
  payload: StatePayload;
}

function parse(state: string): Token {
  const [version = '', body = '', mac = ''] = state.split('.');
  return { version, body, mac, payload: JSON.parse(Buffer.from(body, 'base64url').toString('utf8')) as StatePayload };
}

function signWith(key: Buffer, body: string): string {
  return `v1.${body}.${createHmac('sha256', key).update(`v1.${body}`).digest('base64url')}`;
}

const bodyOf = (payload: object) => Buffer.from(JSON.stringify(payload)).toString('base64url');

type MutationClass =
  | 'bit-flip'
  | 'truncation'
  | 'appended'
  | 'wrong-key'
  | 'edited-wrong-key'
  | 'base64-swap'
  | 'whitespace'
  | 'other-version'
  | 'signed-expired'
  | 'signed-other-organization'
  | 'signed-other-user'
  | 'signed-other-attempt';

interface Mutation {
  kind: MutationClass;
  state: string;
  expected: RefusalCode;
}

/** Text without U+0000, which every field refuses up front (INVALID_ARGUMENT) before a state is even read. */
const text = (options: { minLength?: number; maxLength?: number } = {}) =>
  fc.string({ unit: 'grapheme', ...options }).map((s) => s.replaceAll('\u0000', ''));

function mutations(original: string, ids: { attemptId: string }): fc.Arbitrary<Mutation> {
  const token = parse(original);
  const realSigner = new StateSigner(t.config.stateSigningKey);
  const wrongKey = fc.uint8Array({ minLength: 16, maxLength: 64 }).map((k) => Buffer.from(k)).filter((k) => !k.equals(t.config.stateSigningKey));
  const invalid = (kind: MutationClass) => (state: string): Mutation => ({ kind, state, expected: 'STATE_INVALID' });
  const edits = fc.oneof(
    fc.constant({ organizationId: stranger.organizationId }),
    fc.uuid().map((organizationId) => ({ organizationId })),
    fc.constant({ userId: colleague.userId }),
    fc.constant({ userId: stranger.userId }),
    fc.uuid().map((attemptId) => ({ attemptId })),
    fc.integer({ min: -20 * 60_000, max: 24 * 60 * 60_000 }).filter((d) => d !== 0).map((d) => ({ expiresAt: token.payload.expiresAt + d })),
    fc.constantFrom({ toolkit: 'facebook' }, { toolkit: 'twitter' }, { nonce: 'AAAAAAAAAAAAAAAAAAAAAA' }, { expiresAt: '9999999999999' }, { attemptId: 7 }),
  );
  const swap = fc.record({
    part: fc.constantFrom('body', 'mac'),
    how: fc.constantFrom('-+', '_/', '+-', '/_', 'pad', 'adjacent', 'case'),
    at: fc.nat(),
  });
  return fc.oneof(
    fc
      .record({ at: fc.nat({ max: original.length - 1 }), bit: fc.integer({ min: 0, max: 7 }) })
      .map(({ at, bit }) => original.slice(0, at) + String.fromCharCode(original.charCodeAt(at) ^ (1 << bit)) + original.slice(at + 1))
      .map(invalid('bit-flip')),
    fc.nat({ max: original.length - 1 }).map((at) => original.slice(0, at)).map(invalid('truncation')),
    fc.oneof(text({ minLength: 1, maxLength: 40 }), fc.constantFrom('.', '.x', '=', '==', '.v1', 'A', '%00', '\\n')).map((s) => original + s).map(invalid('appended')),
    wrongKey.map((key) => signWith(key, token.body)).map(invalid('wrong-key')),
    fc.tuple(wrongKey, edits).map(([key, edit]) => signWith(key, bodyOf({ ...token.payload, ...edit }))).map(invalid('edited-wrong-key')),
    swap
      .map(({ part, how, at }) => {
        const source = part === 'body' ? token.body : token.mac;
        let changed: string;
        if (how === 'pad') changed = `${source}=`;
        else if (how === 'adjacent') {
          const i = at % (source.length - 1);
          changed = source.slice(0, i) + source[i + 1] + source[i] + source.slice(i + 2);
        } else if (how === 'case') {
          const i = at % source.length;
          const c = source[i]!;
          changed = source.slice(0, i) + (c === c.toUpperCase() ? c.toLowerCase() : c.toUpperCase()) + source.slice(i + 1);
        } else changed = source.replaceAll(how[0]!, how[1]!);
        return part === 'body' ? `${token.version}.${changed}.${token.mac}` : `${token.version}.${token.body}.${changed}`;
      })
      .filter((state) => state !== original)
      .map(invalid('base64-swap')),
    fc
      .oneof(
        fc.constantFrom('', ' ', '\t', '\n', '\r\n', '  \t ', '\u00a0', '\u2028', '.', '..', '...'),
        fc.constantFrom(' ', '\n', '\t').map((w) => w + original),
        fc.constantFrom(' ', '\n', '\t').map((w) => original + w),
      )
      .map(invalid('whitespace')),
    fc
      .constantFrom('v2', 'v0', 'V1', 'v1 ', 'v', 'v11', '', 'v1.v1', '1')
      .map((version) => `${version}.${token.body}.${token.mac}`)
      .map(invalid('other-version')),
    // Edits signed with the real key: what only the service itself could produce, refused for what they say.
    fc.integer({ min: 0, max: 7 * 24 * 60 * 60_000 }).map((ago) => ({
      kind: 'signed-expired' as const,
      state: realSigner.sign({ ...token.payload, expiresAt: Date.now() - ago }),
      expected: 'STATE_EXPIRED' as const,
    })),
    fc.oneof(fc.constant(stranger.organizationId), fc.uuid()).map((organizationId) => ({
      kind: 'signed-other-organization' as const,
      state: realSigner.sign({ ...token.payload, organizationId }),
      expected: 'STATE_ORGANIZATION_MISMATCH' as const,
    })),
    fc.oneof(fc.constant(colleague.userId), fc.constant(stranger.userId), fc.uuid()).map((userId) => ({
      kind: 'signed-other-user' as const,
      state: realSigner.sign({ ...token.payload, userId }),
      expected: 'STATE_USER_MISMATCH' as const,
    })),
    // A well-signed state naming an attempt that does not exist has nothing left to complete.
    fc.uuid().filter((id) => id !== ids.attemptId).map((attemptId) => ({
      kind: 'signed-other-attempt' as const,
      state: realSigner.sign({ ...token.payload, attemptId }),
      expected: 'STATE_ALREADY_USED' as const,
    })),
  );
}

/** What the completion answered: a refusal code with its status, or success. */
async function completion(api: ConnectionsApi, apiKey: string, state: string): Promise<{ code: string; status: number } | 'completed'> {
  try {
    await api.complete(apiKey, { state, connectedAccountId: ACCOUNT });
    return 'completed';
  } catch (error) {
    if (error instanceof Refusal) return { code: error.code, status: error.status };
    throw error;
  }
}

it('refuses every tampered connection state and still completes the attempt with the original afterwards', async () => {
  const started = await apis.rest.start(owner.apiKey, { toolkit: 'instagram' });
  const original = started.state;
  const { attemptId } = parse(original).payload;
  const before = await snapshotDomain(t);

  const seed = ROBUSTNESS_SEED;
  const generated = fc.sample(fc.tuple(mutations(original, { attemptId }), fc.constantFrom<TransportUnderTest>('rest', 'grpc')), { numRuns: MUTATIONS, seed });
  const perClass = new Map<MutationClass, number>();
  const failures: string[] = [];
  await inPool(generated, 8, async ([mutation, transport]) => {
    perClass.set(mutation.kind, (perClass.get(mutation.kind) ?? 0) + 1);
    const answer = await completion(apis[transport], owner.apiKey, mutation.state);
    const [httpStatus, grpcCode] = REFUSALS[mutation.expected];
    const expected = { code: mutation.expected, status: transport === 'rest' ? httpStatus : grpcCode };
    if (answer === 'completed' || answer.code !== expected.code || answer.status !== expected.status) {
      failures.push(`${mutation.kind} over ${transport}: ${JSON.stringify(mutation.state).slice(0, 200)} → ${JSON.stringify(answer)}, expected ${JSON.stringify(expected)}`);
    }
  });

  // The original state in the wrong hands is refused too, on both transports.
  for (const transport of ['rest', 'grpc'] as const) {
    for (const [who, key, code] of [
      ['colleague', colleague.apiKey, 'STATE_USER_MISMATCH'],
      ['another organization', stranger.apiKey, 'STATE_ORGANIZATION_MISMATCH'],
    ] as const) {
      const answer = await completion(apis[transport], key, original);
      const [httpStatus, grpcCode] = REFUSALS[code];
      if (answer === 'completed' || answer.code !== code || answer.status !== (transport === 'rest' ? httpStatus : grpcCode)) {
        failures.push(`original state by ${who} over ${transport} → ${JSON.stringify(answer)}, expected ${code}`);
      }
    }
  }

  const after = await snapshotDomain(t);
  const [attempt] = await rows<{ completed_at: Date | null }>(t, 'select completed_at from connection_attempts where id = ?', [attemptId]);
  console.log(
    [
      `state tokens: ${generated.length} mutations tried (seed ${seed}), plus 4 completions of the original by the wrong caller`,
      `per class: ${JSON.stringify(Object.fromEntries([...perClass].sort()))}`,
      `failures: ${failures.length}`,
      ...failures.slice(0, 20).map((f) => `  ${f}`),
    ].join('\n'),
  );
  expect(failures).toEqual([]);
  expect(after).toEqual(before);
  expect(attempt).toEqual({ completed_at: null });

  // Nothing was consumed: the right person completes the attempt with the untouched state.
  const approved = await approveSandboxAccount(t.url, started.redirectUrl, 'bakery');
  const completed = await apis.grpc.complete(owner.apiKey, { state: original, connectedAccountId: approved });
  expect(completed.connection).toMatchObject({ toolkit: 'instagram', identity: { accountId: '17841400000000001' } });
  const again = await completion(apis.rest, owner.apiKey, original);
  expect(again).toEqual({ code: 'STATE_ALREADY_USED', status: 409 });
}, 120_000);

it('refuses a state signed for another attempt of the same person without touching either attempt', async () => {
  // Two live attempts of one person: a state re-signed with a wrong key to name the other attempt is invalid.
  const first = await apis.rest.start(owner.apiKey, { toolkit: 'facebook' });
  const second = await apis.grpc.start(owner.apiKey, { toolkit: 'facebook' });
  const secondId = parse(second.state).payload.attemptId;
  const forged = signWith(Buffer.from(randomUUID()), bodyOf({ ...parse(first.state).payload, attemptId: secondId }));
  expect(await completion(apis.rest, owner.apiKey, forged)).toEqual({ code: 'STATE_INVALID', status: 400 });
  const open = await rows<{ n: string }>(t, 'select count(*)::text as n from connection_attempts where id in (?, ?) and completed_at is null', [
    parse(first.state).payload.attemptId,
    secondId,
  ]);
  expect(open).toEqual([{ n: '2' }]);
});
