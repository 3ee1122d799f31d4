/**
 * The reference for the create-webhook figure, as a segment server (see child.ts): K
 * workers, one pg client each, inserting one webhook_endpoints row per transaction
 * (begin; insert; commit), shaped like the rows the service writes (uuid, organization,
 * https URL, event names, key id, a 77-byte AES-GCM-sized ciphertext, timestamps).
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { Client } from 'pg';
import { closedLoop, input, runMain, serveSegments } from './child';

interface Input {
  databaseUrl: string;
  organizationId: string;
  url: string;
  workers: number;
  warmupSeconds: number;
}

const INSERT = `insert into webhook_endpoints
  (id, organization_id, url, description, event_names, secret_key_id, secret_ciphertext, disabled_at, created_at, updated_at)
  values ($1, $2, $3, $4, $5, $6, $7, null, $8, $9)`;

runMain(async () => {
  const spec = input<Input>();
  const clients = await Promise.all(
    Array.from({ length: spec.workers }, async () => {
      const client = new Client({ connectionString: spec.databaseUrl });
      await client.connect();
      return client;
    }),
  );
  // Loop i always uses clients[i]: one client per worker, one transaction at a time.
  const insertOne = async (loop: number) => {
    const client = clients[loop]!;
    const now = new Date();
    await client.query('begin');
    try {
      // 12-byte nonce + 49-byte whsec_ secret + 16-byte tag, as SecretBox.seal makes it.
      await client.query(INSERT, [randomUUID(), spec.organizationId, spec.url, '', ['webhook.test'], 'dev', randomBytes(77), now, now]);
      await client.query('commit');
    } catch (error) {
      await client.query('rollback').catch(() => undefined);
      throw error;
    }
  };
  await serveSegments({
    warmup: () => closedLoop(spec.workers, spec.warmupSeconds, insertOne),
    segment: (command) => closedLoop(spec.workers, command.seconds ?? 1, insertOne),
    cleanup: async () => {
      await Promise.all(clients.map((c) => c.end()));
    },
  });
});
