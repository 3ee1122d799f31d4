/**
 * The service under test, in its own process: loadConfig from the environment the
 * parent chose (NODE_ENV=test, PORT=0, DATABASE_URL, ...), start(), print the URL.
 */
import { loadConfig } from '../src/config';
import { start } from '../src/server';
import { emit, onStop, runMain } from './child';

runMain(async () => {
  const config = loadConfig(process.env);
  const app = await start({ config });
  onStop(() => app.close());
  emit({ type: 'ready', url: app.url, pid: process.pid });
});
