/**
 * The README's examples cannot drift from the code: every `curl` and `buf curl` command
 * of its "Examples" section runs against a live test app, and the receiver snippets of
 * "Delivery format" verify a real delivery (and refuse a tampered one).
 */
import fs from 'node:fs';
import https from 'node:https';
import path from 'node:path';
import { spawn } from 'node:child_process';
import type { IncomingHttpHeaders } from 'node:http';
import type { AddressInfo } from 'node:net';
import { startTestApp, type TestApp, type Tenant } from '../support/app';
import { rest } from '../support/clients';
import { makeTestTls, type TestTls } from '../support/tls';
import { startHttpsReceiver } from '../support/https-receiver';

const ROOT = path.resolve(__dirname, '../..');
const README = fs.readFileSync(path.join(ROOT, 'README.md'), 'utf8');

interface Run {
  status: number | null;
  stdout: string;
  stderr: string;
}

/** Asynchronous: a blocking spawn would stall the app this process serves. */
function run(command: string, args: string[], env: Record<string, string> = {}): Promise<Run> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { cwd: ROOT, env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => (stdout += chunk));
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
    const timer = setTimeout(() => child.kill('SIGKILL'), 25_000);
    child.on('error', reject);
    child.on('close', (status) => {
      clearTimeout(timer);
      resolve({ status, stdout, stderr });
    });
  });
}

/** The body of a level-2 section, up to the next level-2 heading. */
function section(markdown: string, heading: string): string {
  const start = markdown.indexOf(`\n## ${heading}\n`);
  if (start < 0) throw new Error(`README.md has no "## ${heading}" section`);
  const rest = markdown.slice(start + heading.length + 5);
  const end = rest.search(/\n## /);
  return end < 0 ? rest : rest.slice(0, end);
}

function fencedBlocks(markdown: string, language: string): string[] {
  return [...markdown.matchAll(new RegExp('^```' + language + '\\n([\\s\\S]*?)^```', 'gm'))].map((m) => m[1] ?? '');
}

/** Shell lines with backslash continuations joined; blank lines and comments dropped. */
function shellCommands(block: string): string[] {
  return block
    .replace(/\\\n\s*/g, ' ')
    .split('\n')
    .map((line) => line.trim())
    .filter((line) => line !== '' && !line.startsWith('#'));
}

/**
 * Variables the examples may use, and where their value comes from: the key is made by
 * the test (as `npm run admin -- bootstrap` would), the others are read from earlier
 * answers exactly as the README says to.
 */
const VARIABLES = ['KEY', 'REDIRECT', 'STATE', 'ACCOUNT', 'ID'] as const;
type Variable = (typeof VARIABLES)[number];

const examples = fencedBlocks(section(README, 'Examples'), 'sh').flatMap(shellCommands);
const commands = examples.filter((line) => !/^[A-Z_]+=/.test(line));

let tls: TestTls;
let t: TestApp;

beforeAll(async () => {
  tls = await makeTestTls();
  t = await startTestApp({ DELIVERY_EXTRA_CA_PEM: tls.caPem, DELIVERY_POLL_INTERVAL_MS: '50' });
});
afterAll(async () => {
  await t?.close();
});

describe('README "Examples"', () => {
  it('are all curl or buf curl commands, or settings of variables this test provides', () => {
    expect(commands.length).toBeGreaterThanOrEqual(5);
    for (const line of examples) {
      const assignment = /^([A-Z_]+)=/.exec(line);
      if (assignment) expect(VARIABLES).toContain(assignment[1]);
      else expect(line).toMatch(/^(curl|npx buf curl) /);
    }
    for (const command of commands) {
      for (const [, name] of command.matchAll(/\$\{?([A-Za-z_]+)/g)) expect(VARIABLES).toContain(name);
    }
  });

  it('run as written against a live app and answer JSON without an error code', async () => {
    const tenant: Tenant = await t.tenant();
    const { host } = new URL(t.url);
    const env: Partial<Record<Variable, string>> = { KEY: tenant.apiKey };
    for (const command of commands) {
      const line = command.replaceAll('localhost:8080', host).replace(/^npx buf /, `${path.join(ROOT, 'node_modules/.bin/buf')} `);
      const result = await run('bash', ['-c', line], env as Record<string, string>);
      const context = `${command}\n→ exit ${result.status}\nstdout: ${result.stdout}\nstderr: ${result.stderr}`;
      expect({ context, status: result.status }).toEqual({ context, status: 0 });
      let answer: any;
      try {
        answer = JSON.parse(result.stdout);
      } catch {
        throw new Error(`not a JSON answer:\n${context}`);
      }
      expect({ context, type: typeof answer, code: answer?.code }).toEqual({ context, type: 'object', code: undefined });
      // "redirectUrl" and "state" from /connections/start, "connectedAccountId" from the
      // callback, "connection.id" from /connections/complete.
      if (typeof answer.redirectUrl === 'string') env.REDIRECT = answer.redirectUrl;
      if (typeof answer.state === 'string') env.STATE = answer.state;
      if (typeof answer.connectedAccountId === 'string') env.ACCOUNT = answer.connectedAccountId;
      if (typeof answer.connection?.id === 'string') env.ID = answer.connection.id;
    }
    // The flow really happened: the account is connected, reconnected to another account and confirmed again.
    const list = await rest(t.url, 'GET', '/api/v1/connections', { apiKey: tenant.apiKey });
    expect(list.body.connections).toEqual([
      expect.objectContaining({ id: env.ID, toolkit: 'instagram', status: 'verified', identity: expect.objectContaining({ handle: 'sandycreates' }) }),
    ]);
  });
});

describe('README "Operator CLI"', () => {
  const lines = fencedBlocks(section(README, 'Operator CLI'), 'sh').flatMap(shellCommands);
  const PREFIX = 'npm run operator -- ';

  const scripts = JSON.parse(fs.readFileSync(path.join(ROOT, 'package.json'), 'utf8')).scripts as Record<string, string>;

  it('is the npm script package.json defines', () => {
    expect(scripts.operator).toBe('scripts/with-node.sh node dist/operator.js');
    expect(lines.length).toBeGreaterThanOrEqual(5);
    for (const line of lines) {
      expect(line.startsWith(PREFIX)).toBe(true);
      for (const [, name] of line.matchAll(/\$\{?([A-Za-z_]+)/g)) expect(name).toBe('ORG');
    }
  });

  it('run as written against a live app', async () => {
    const tenant = await t.tenant({ plan: 'enterprise' });
    const env = { ORG: tenant.organizationId, OPERATOR_URL: t.url, OPERATOR_TOKEN: t.config.operatorToken };
    // What `npm run operator --` runs, without npm's own start-up.
    const cli = `${scripts.operator} `;
    for (const line of lines) {
      const result = await run('bash', ['-c', cli + line.slice(PREFIX.length)], env);
      const context = `${line}\n→ exit ${result.status}\nstdout: ${result.stdout}\nstderr: ${result.stderr}`;
      expect({ context, status: result.status, stderr: result.stderr }).toEqual({ context, status: 0, stderr: '' });
      if (line.includes('--json')) expect(() => JSON.parse(result.stdout)).not.toThrow();
    }
    const [org] = await t.orm.em.fork().execute('select monthly_delivery_quota from organizations where id = ?', [tenant.organizationId]);
    expect(Number(org!.monthly_delivery_quota)).toBe(250000);
    const switches = await t.orm.em.fork().execute('select action from audit_events where organization_id = ? order by id', [tenant.organizationId]);
    expect(switches.map((row: any) => row.action)).toEqual(['operator.kill_switch.on', 'operator.kill_switch.off']);
  });
});

/** A receiver snippet of the README, run on a delivery's headers and body and a secret (WHSEC, HEADERS_B64, BODY_B64). */
interface Snippet {
  snippet: string | undefined;
  run(env: Record<string, string>): Promise<Run>;
}

/** The Python block defining `name`, called as a receiver would. */
function pythonSnippet(name: string): Snippet {
  const [snippet] = fencedBlocks(README, 'python').filter((block) => block.includes(`def ${name}(`));
  const call = [
    'import base64 as _b64, json as _json, os as _os',
    `${name}(_os.environ["WHSEC"], _json.loads(_b64.b64decode(_os.environ["HEADERS_B64"])), _b64.b64decode(_os.environ["BODY_B64"]))`,
  ].join('\n');
  return { snippet, run: (env) => run('python3', ['-c', `${snippet}\n${call}\n`], env) };
}

/**
 * The TypeScript block containing `marker`. `req` and `rawBody` are what the receiver's
 * framework hands over; the snippet runs from the repository root as written, import path included.
 */
function nodeSnippet(marker: string): Snippet {
  const [snippet] = fencedBlocks(README, 'ts').filter((block) => block.includes(marker));
  const setup = [
    "const req = { headers: JSON.parse(Buffer.from(process.env.HEADERS_B64!, 'base64').toString('utf8')) };",
    "const rawBody = Buffer.from(process.env.BODY_B64!, 'base64');",
  ].join('\n');
  return { snippet, run: (env) => run(process.execPath, [require.resolve('tsx/cli'), '--eval', `${setup}\n${snippet}`], env) };
}

function tampered(body: Buffer): Buffer {
  const copy = Buffer.from(body);
  copy[Math.floor(copy.length / 2)]! ^= 0x01;
  return copy;
}

interface Captured {
  headers: IncomingHttpHeaders;
  body: Buffer;
}

/** A customer's HTTPS endpoint that keeps the exact bytes and headers it was sent. */
async function receiver(): Promise<{ url: string; next: Promise<Captured>; close(): Promise<void> }> {
  let deliver!: (captured: Captured) => void;
  const next = new Promise<Captured>((resolve) => (deliver = resolve));
  const server = https.createServer({ key: tls.keyPem, cert: tls.certPem }, (req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      res.writeHead(200).end();
      deliver({ headers: req.headers, body: Buffer.concat(chunks) });
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `https://127.0.0.1:${port}`,
    next,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

describe('README receiver snippets verify a real delivery', () => {
  let secret: string;
  let captured: Captured;

  beforeAll(async () => {
    const endpoint = await receiver();
    try {
      const tenant = await t.tenant();
      const created = await rest(t.url, 'POST', '/api/v1/webhooks', { apiKey: tenant.apiKey, body: { url: `${endpoint.url}/in`, eventNames: ['webhook.test'] } });
      expect(created.status).toBe(200);
      secret = created.body.signingSecret;
      const test = await rest(t.url, 'POST', `/api/v1/webhooks/${created.body.endpoint.id}/test`, { apiKey: tenant.apiKey });
      expect(test.status).toBe(200);
      let timer: NodeJS.Timeout | undefined;
      captured = await Promise.race([
        endpoint.next,
        new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error('no delivery within 10 s')), 10_000))),
      ]).finally(() => clearTimeout(timer));
    } finally {
      await endpoint.close();
    }
    expect(secret).toMatch(/^whsec_/);
    expect(JSON.parse(captured.body.toString('utf8'))).toMatchObject({ type: 'webhook.test' });
  });

  function inputs(body: Buffer, secretUsed = secret): Record<string, string> {
    return {
      WHSEC: secretUsed,
      HEADERS_B64: Buffer.from(JSON.stringify(captured.headers)).toString('base64'),
      BODY_B64: body.toString('base64'),
    };
  }

  describe('Python', () => {
    const { snippet, run: python } = pythonSnippet('verify');

    it('is in the README', () => {
      expect(snippet).toBeDefined();
    });

    it('accepts the delivery as received', async () => {
      const result = await python(inputs(captured.body));
      expect(result).toMatchObject({ status: 0, stderr: '' });
    });

    it('refuses it with one body byte flipped, or under another secret', async () => {
      const flipped = await python(inputs(tampered(captured.body)));
      expect(flipped.status).not.toBe(0);
      expect(flipped.stderr).toContain('signature mismatch');
      const otherSecret = await python(inputs(captured.body, `${secret}x`));
      expect(otherSecret.status).not.toBe(0);
      expect(otherSecret.stderr).toContain('signature mismatch');
    });
  });

  describe('Node', () => {
    const { snippet, run: node } = nodeSnippet('verifyWebhook(');

    it('is in the README', () => {
      expect(snippet).toBeDefined();
    });

    it('accepts the delivery as received', async () => {
      const result = await node(inputs(captured.body));
      expect(result).toMatchObject({ status: 0, stderr: '' });
    });

    it('refuses it with one body byte flipped, or under another secret', async () => {
      const flipped = await node(inputs(tampered(captured.body)));
      expect(flipped.status).not.toBe(0);
      expect(flipped.stderr).toContain('SIGNATURE_MISMATCH');
      const otherSecret = await node(inputs(captured.body, `${secret}x`));
      expect(otherSecret.status).not.toBe(0);
      expect(otherSecret.stderr).toContain('SIGNATURE_MISMATCH');
    });
  });
});

describe('README "Signing schemes and rotation" receiver snippets verify real deliveries during an overlap', () => {
  interface Delivered {
    headers: IncomingHttpHeaders;
    body: Buffer;
  }
  /** One delivery to each endpoint, made while its rotation's overlap runs; the old and new secrets. */
  const legacy = { old: '', next: '', delivered: undefined as unknown as Delivered };
  const standard = { old: '', next: '', delivered: undefined as unknown as Delivered };

  beforeAll(async () => {
    const endpoint = await startHttpsReceiver({ tls });
    try {
      const tenant = await t.tenant();
      for (const [target, scheme] of [
        [legacy, 'legacy'],
        [standard, 'standard'],
      ] as const) {
        const created = await rest(t.url, 'POST', '/api/v1/webhooks', { apiKey: tenant.apiKey, body: { url: `${endpoint.url}/${scheme}`, signatureScheme: scheme } });
        expect(created.status).toBe(200);
        const id = created.body.endpoint.id as string;
        const rotated = await rest(t.url, 'POST', `/api/v1/webhooks/${id}/rotate-secret`, { apiKey: tenant.apiKey, body: { overlapSeconds: 3600 } });
        expect(rotated.status).toBe(200);
        target.old = created.body.signingSecret;
        target.next = rotated.body.signingSecret;
        expect((await rest(t.url, 'POST', `/api/v1/webhooks/${id}/test`, { apiKey: tenant.apiKey })).status).toBe(200);
      }
      const requests = await endpoint.waitForRequests(2, 10_000);
      for (const [target, path] of [
        [legacy, '/legacy'],
        [standard, '/standard'],
      ] as const) {
        const request = requests.find((r) => r.path === path)!;
        target.delivered = { headers: request.headers, body: Buffer.from(request.rawBody, 'utf8') };
      }
    } finally {
      await endpoint.close();
    }
  });

  function inputs(delivered: Delivered, secret: string, body = delivered.body): Record<string, string> {
    return { WHSEC: secret, HEADERS_B64: Buffer.from(JSON.stringify(delivered.headers)).toString('base64'), BODY_B64: body.toString('base64') };
  }

  describe('legacy, Python', () => {
    const today = pythonSnippet('verify');
    const rotating = pythonSnippet('verify_rotating');

    it('"Delivery format" as it is: the receiver that changed nothing keeps verifying with its old secret', async () => {
      expect(await today.run(inputs(legacy.delivered, legacy.old))).toMatchObject({ status: 0, stderr: '' });
    });

    it('verify_rotating takes the old secret and the new one, and refuses a flipped byte or another secret', async () => {
      expect(rotating.snippet).toBeDefined();
      expect(await rotating.run(inputs(legacy.delivered, legacy.old))).toMatchObject({ status: 0, stderr: '' });
      expect(await rotating.run(inputs(legacy.delivered, legacy.next))).toMatchObject({ status: 0, stderr: '' });
      const flipped = await rotating.run(inputs(legacy.delivered, legacy.next, tampered(legacy.delivered.body)));
      expect(flipped.stderr).toContain('signature mismatch');
      const other = await rotating.run(inputs(legacy.delivered, `${legacy.next}x`));
      expect(other.stderr).toContain('signature mismatch');
    });
  });

  describe('legacy, Node', () => {
    const { run: node } = nodeSnippet('verifyWebhook(');

    it('verifyWebhook takes the old secret and the new one', async () => {
      expect(await node(inputs(legacy.delivered, legacy.old))).toMatchObject({ status: 0, stderr: '' });
      expect(await node(inputs(legacy.delivered, legacy.next))).toMatchObject({ status: 0, stderr: '' });
      expect((await node(inputs(legacy.delivered, `${legacy.next}x`))).stderr).toContain('SIGNATURE_MISMATCH');
    });
  });

  describe('standard', () => {
    const verifyStandard = pythonSnippet('verify_standard');
    const { snippet, run: node } = nodeSnippet('new Webhook(');

    it('are in the README', () => {
      expect(verifyStandard.snippet).toBeDefined();
      expect(snippet).toBeDefined();
    });

    it('Python verify_standard takes either secret and refuses a flipped byte or another secret', async () => {
      expect(await verifyStandard.run(inputs(standard.delivered, standard.old))).toMatchObject({ status: 0, stderr: '' });
      expect(await verifyStandard.run(inputs(standard.delivered, standard.next))).toMatchObject({ status: 0, stderr: '' });
      expect((await verifyStandard.run(inputs(standard.delivered, standard.next, tampered(standard.delivered.body)))).stderr).toContain('signature mismatch');
      expect((await verifyStandard.run(inputs(standard.delivered, `whsec_${Buffer.alloc(32, 7).toString('base64')}`))).stderr).toContain('signature mismatch');
    });

    it('Node with standardwebhooks takes either secret and refuses a flipped byte', async () => {
      expect(await node(inputs(standard.delivered, standard.old))).toMatchObject({ status: 0, stderr: '' });
      expect(await node(inputs(standard.delivered, standard.next))).toMatchObject({ status: 0, stderr: '' });
      expect((await node(inputs(standard.delivered, standard.next, tampered(standard.delivered.body)))).stderr).toContain('No matching signature found');
    });
  });
});
