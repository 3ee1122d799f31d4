import { parseArgs } from 'node:util';
import { loadConfig, type Config, createLogger } from '../config';
import { migrateAs, openDatabase, resolveDatabaseUrl, isUuid, isUniqueViolation, OrganizationSchema, UserSchema, type EntityManager } from '../db';
import { rotateSigningSecrets } from '../endpoints';
import { SecretBox } from '../secrets';
import { createOrganization, createUser, issueApiKey, revokeApiKey, isPlan, isRole, isPermission, PERMISSIONS } from '../auth';

const USAGE = `usage: npm run admin -- <command> [options] [--json]

  bootstrap                                   development: organization + owner + key with every scope
  create-org   --name NAME --plan PLAN        plan: starter | agency | scale | command | enterprise
  create-user  --org ID --email EMAIL --role ROLE      role: owner | admin | member | viewer
  create-key   --org ID --user ID --scopes a,b [--name NAME]
               scopes: ${PERMISSIONS.join(', ')}
  revoke-key   --key ID
  rotate-secrets                              re-encrypt webhook signing secrets under the first
                                              key of SECRET_ENCRYPTION_KEYS (the others must still be listed)
`;

class UsageError extends Error {}

function need(values: Record<string, unknown>, name: string): string {
  const value = values[name];
  if (typeof value !== 'string' || value.trim() === '') throw new UsageError(`--${name} is required`);
  return value.trim();
}

/** Ids are uuids; anything else would reach the database as a type error instead of a clear refusal. */
function needId(values: Record<string, unknown>, name: string): string {
  const value = need(values, name);
  if (!isUuid(value)) throw new UsageError(`--${name} must be an id (uuid), got "${value}"`);
  return value;
}

async function run(command: string, values: Record<string, string | boolean | undefined>, em: EntityManager, config: Config): Promise<Record<string, unknown>> {
  switch (command) {
    case 'create-org': {
      const plan = need(values, 'plan');
      if (!isPlan(plan)) throw new UsageError(`unknown plan "${plan}"`);
      const org = await createOrganization(em, { name: need(values, 'name'), plan });
      return { organizationId: org.id, name: org.name, plan: org.plan };
    }
    case 'create-user': {
      const role = need(values, 'role');
      if (!isRole(role)) throw new UsageError(`unknown role "${role}"`);
      const organizationId = needId(values, 'org');
      const email = need(values, 'email');
      if (!(await em.findOne(OrganizationSchema, { id: organizationId }))) throw new UsageError(`no organization ${organizationId}`);
      const user = await createUser(em, { organizationId, email, role }).catch((error: unknown) => {
        if (isUniqueViolation(error)) throw new UsageError(`${email} is already a user of organization ${organizationId}`);
        throw error;
      });
      return { userId: user.id, organizationId: user.organizationId, email: user.email, role: user.role };
    }
    case 'create-key': {
      const scopes = need(values, 'scopes').split(',').map((s) => s.trim()).filter(Boolean);
      const unknown = scopes.filter((s) => !isPermission(s));
      if (unknown.length > 0) throw new UsageError(`unknown scope(s): ${unknown.join(', ')}`);
      if (scopes.length === 0) throw new UsageError('--scopes needs at least one scope');
      const organizationId = needId(values, 'org');
      const userId = needId(values, 'user');
      // A key bound to a user of another organization could never authenticate.
      if (!(await em.findOne(UserSchema, { id: userId, organizationId }))) {
        throw new UsageError(`no user ${userId} in organization ${organizationId}`);
      }
      const key = await issueApiKey(em, {
        organizationId,
        userId,
        name: typeof values.name === 'string' ? values.name : 'admin cli',
        scopes,
      });
      return { keyId: key.id, apiKey: key.key, scopes: key.scopes };
    }
    case 'revoke-key': {
      const revoked = await revokeApiKey(em, needId(values, 'key'));
      if (!revoked) throw new UsageError('no such key, or it was already revoked');
      return { keyId: values.key, revoked: true };
    }
    case 'rotate-secrets': {
      const secrets = new SecretBox(config.secretKeys, config.currentSecretKeyId);
      const rotated = await rotateSigningSecrets(em, secrets);
      return { currentKeyId: secrets.currentKeyId, rotated };
    }
    case 'bootstrap': {
      const org = await createOrganization(em, { name: 'Development', plan: 'scale' });
      const user = await createUser(em, { organizationId: org.id, email: `owner+${org.id.slice(0, 8)}@example.com`, role: 'owner' });
      const key = await issueApiKey(em, { organizationId: org.id, userId: user.id, name: 'bootstrap', scopes: [...PERMISSIONS] });
      return { organizationId: org.id, userId: user.id, keyId: key.id, apiKey: key.key, scopes: key.scopes };
    }
    default:
      throw new UsageError(`unknown command "${command}"`);
  }
}

function parseCommandLine(argv: string[]) {
  return parseArgs({
    args: argv,
    allowPositionals: true,
    options: {
      json: { type: 'boolean' },
      name: { type: 'string' },
      plan: { type: 'string' },
      org: { type: 'string' },
      user: { type: 'string' },
      email: { type: 'string' },
      role: { type: 'string' },
      scopes: { type: 'string' },
      key: { type: 'string' },
      help: { type: 'boolean' },
    },
  });
}

/** Where a run reads its environment and writes its output: the process's own, or a test's. */
export interface CliIo {
  stdout: { write(text: string): unknown };
  stderr: { write(text: string): unknown };
  env: NodeJS.ProcessEnv;
}

/** Runs one command and returns the exit code: 0 done, 1 failed, 2 bad usage (nothing written). */
export async function main(argv: string[], io: CliIo): Promise<number> {
  let parsed: ReturnType<typeof parseCommandLine>;
  try {
    parsed = parseCommandLine(argv);
  } catch (error) {
    // Unknown options and missing option values are usage mistakes, like an unknown plan.
    io.stderr.write(`admin: ${error instanceof Error ? error.message : String(error)}\n\n${USAGE}`);
    return 2;
  }
  const { positionals, values } = parsed;
  const [command] = positionals;
  if (!command || values.help) {
    io.stdout.write(USAGE);
    return command ? 0 : 2;
  }
  try {
    const config = loadConfig(io.env);
    // Logs go to stderr: stdout carries only the answer, so `--json | jq` reads nothing else.
    const logger = createLogger(values.json ? 'warn' : config.logLevel, io.stderr);
    const database = await resolveDatabaseUrl(config.databaseUrl, logger);
    try {
      // Migrations run as the owner role; the service role that runs the command cannot.
      await migrateAs(database, config.databaseMigrationUrl || undefined);
      const orm = await openDatabase(database);
      try {
        const result = await run(command, values, orm.em.fork(), config);
        if (values.json) io.stdout.write(`${JSON.stringify(result)}\n`);
        else for (const [name, value] of Object.entries(result)) io.stdout.write(`${name}: ${String(value)}\n`);
        if ('apiKey' in result && !values.json) io.stdout.write('The API key is shown once; store it now.\n');
        return 0;
      } finally {
        await orm.close();
      }
    } finally {
      await database.stop();
    }
  } catch (error) {
    if (error instanceof UsageError) {
      io.stderr.write(`admin: ${error.message}\n\n${USAGE}`);
      return 2;
    }
    io.stderr.write(`admin: ${error instanceof Error ? error.message : String(error)}\n`);
    return 1;
  }
}
