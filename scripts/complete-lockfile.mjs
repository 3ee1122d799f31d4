// The npm registry these machines reach carries only linux-x64 builds of native
// packages, so `npm install` leaves other platforms' optional packages out of
// package-lock.json, and `npm ci` then refuses the lockfile as out of sync. This
// records each missing optional package as an optional entry; npm skips the ones it
// cannot fetch. Run it after every `npm install` that changes the lockfile.
import { readFileSync, writeFileSync } from 'node:fs';

const path = new URL('../package-lock.json', import.meta.url);
const lock = JSON.parse(readFileSync(path, 'utf8'));
const packages = lock.packages;
let added = 0;
for (const [where, meta] of Object.entries(packages)) {
  for (const [name, version] of Object.entries(meta.optionalDependencies ?? {})) {
    const top = `node_modules/${name}`;
    if (packages[top] || packages[`${where}/node_modules/${name}`]) continue;
    packages[top] = { version, optional: true, ...(meta.dev ? { dev: true } : {}) };
    added++;
  }
}
lock.packages = Object.fromEntries(Object.entries(packages).sort(([a], [b]) => (a === '' ? -1 : b === '' ? 1 : a < b ? -1 : a > b ? 1 : 0)));
writeFileSync(path, `${JSON.stringify(lock, null, 2)}\n`);
console.log(`complete-lockfile: ${added} optional entries added`);
