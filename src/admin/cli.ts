import { loadConfig, type Config, createLogger } from '../config';
import { migrateAs, openDatabase, resolveDatabaseUrl, isUniqueViolation, OrganizationSchema, UserSchema, type EntityManager } from '../db';
import { idOption, optionText, requiredOption, runCommandLine, UsageError, type CliIo, type CommandLine } from '../command-line';
import { rotateSigningSecrets } from '../endpoints';
import { SecretBox } from '../secrets';
import { createOrganization, createUser, developmentOrganization, issueApiKey, revokeApiKey, isPlan, isRole, isPermission, PERMISSIONS } from '../auth';

const USAGE = `usage: npm run admin -- <command> [options] [--json]

  bootstrap                                   a new key with every scope for the development organization's
                                              owner (organization and owner made on first use)
  create-org   --name NAME --plan PLAN        plan: starter | agency | scale | command | enterprise
  create-user  --org ID --email EMAIL --role ROLE      role: owner | admin | member | viewer
  create-key   --org ID --user ID --scopes a,b [--name NAME]
               scopes: ${PERMISSIONS.join(', ')}
  revoke-key   --key ID
  rotate-secrets                              re-encrypt webhook signing secrets under the first
                                              key of SECRET_ENCRYPTION_KEYS (the others must still be listed)
`;

const OPTIONS = {
  name: { type: 'string' },
  plan: { type: 'string' },
  org: { type: 'string' },
  user: { type: 'string' },
  email: { type: 'string' },
  role: { type: 'string' },
  scopes: { type: 'string' },
  key: { type: 'string' },
} as const;

type Values = CommandLine<typeof OPTIONS>['values'];

async function run(command: string, values: Values, em: EntityManager, config: Config): Promise<Record<string, unknown>> {
  switch (command) {
    case 'create-org': {
      const plan = requiredOption(values, 'plan');
      if (!isPlan(plan)) throw new UsageError(`unknown plan "${plan}"`);
      const org = await createOrganization(em, { name: requiredOption(values, 'name'), plan });
      return { organizationId: org.id, name: org.name, plan: org.plan };
    }
    case 'create-user': {
      const role = requiredOption(values, 'role');
      if (!isRole(role)) throw new UsageError(`unknown role "${role}"`);
      const organizationId = idOption(values, 'org', true);
      const email = requiredOption(values, 'email');
      if (!(await em.findOne(OrganizationSchema, { id: organizationId }))) throw new UsageError(`no organization ${organizationId}`);
      const user = await createUser(em, { organizationId, email, role }).catch((error: unknown) => {
        if (isUniqueViolation(error)) throw new UsageError(`${email} is already a user of organization ${organizationId}`);
        throw error;
      });
      return { userId: user.id, organizationId: user.organizationId, email: user.email, role: user.role };
    }
    case 'create-key': {
      const scopes = requiredOption(values, 'scopes').split(',').map((s) => s.trim()).filter(Boolean);
      const unknown = scopes.filter((s) => !isPermission(s));
      if (unknown.length > 0) throw new UsageError(`unknown scope(s): ${unknown.join(', ')}`);
      if (scopes.length === 0) throw new UsageError('--scopes needs at least one scope');
      const organizationId = idOption(values, 'org', true);
      const userId = idOption(values, 'user', true);
      // A key bound to a user of another organization could never authenticate.
      if (!(await em.findOne(UserSchema, { id: userId, organizationId }))) {
        throw new UsageError(`no user ${userId} in organization ${organizationId}`);
      }
      const key = await issueApiKey(em, {
        organizationId,
        userId,
        name: optionText(values, 'name') ?? 'admin cli',
        scopes,
      });
      return { keyId: key.id, apiKey: key.key, scopes: key.scopes };
    }
    case 'revoke-key': {
      const revoked = await revokeApiKey(em, idOption(values, 'key', true));
      if (!revoked) throw new UsageError('no such key, or it was already revoked');
      return { keyId: values.key, revoked: true };
    }
    case 'rotate-secrets': {
      const secrets = new SecretBox(config.secretKeys, config.currentSecretKeyId);
      const rotated = await rotateSigningSecrets(em, secrets);
      return { currentKeyId: secrets.currentKeyId, rotated };
    }
    case 'bootstrap': {
      const { organization, owner } = await developmentOrganization(em);
      const key = await issueApiKey(em, { organizationId: organization.id, userId: owner.id, name: 'bootstrap', scopes: [...PERMISSIONS] });
      return { organizationId: organization.id, userId: owner.id, keyId: key.id, apiKey: key.key, scopes: key.scopes };
    }
    default:
      throw new UsageError(`unknown command "${command}"`);
  }
}

/** Runs one command and returns the exit code: 0 done, 1 failed, 2 bad usage (nothing written). */
export function main(argv: string[], io: CliIo): Promise<number> {
  return runCommandLine({ name: 'admin', usage: USAGE, options: OPTIONS, run: ({ positionals: [command], values }) => runCommand(command!, values, io) }, argv, io);
}

async function runCommand(command: string, values: Values, io: CliIo): Promise<number> {
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
}
