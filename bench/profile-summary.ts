/**
 * Summarises a V8 CPU profile (`node --cpu-prof`, e.g. the service run with
 * BENCH_SERVER_NODE_ARGS="--cpu-prof --cpu-prof-dir=/tmp/prof") as text: self time by
 * where the code lives (this project's modules, each dependency, Node's internals, the
 * garbage collector), the functions with the most self time, and the inclusive time of
 * this project's own functions (a function's share of the samples it is on the stack of).
 *
 * It ends with the busy time by layer: each sample goes to the layer of the first frame on
 * its stack that belongs to one (zlib anywhere on the stack: compression; a socket write:
 * to PostgreSQL when pg is on the stack, else to the client; then the nearest dependency or
 * module of this project), so the time Node's internals and native code spend on a layer's
 * behalf counts for that layer. `skip` leaves out the first seconds (start-up, seeding).
 *
 *   scripts/with-node.sh tsx bench/profile-summary.ts /tmp/prof/CPU.*.cpuprofile [top] [skip]
 */
import fs from 'node:fs';

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string };
  children?: number[];
}

interface Profile {
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
}

/** Where a function lives: `src/<module>`, a dependency's package name, `node:internal`, or V8's own entries. */
function placeOf(url: string, functionName: string): string {
  if (!url) return functionName.startsWith('(') ? functionName : '(native)';
  const dependency = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(url);
  if (dependency) return dependency[1]!;
  const own = /\/(src|workflows)\/([^/]+)/.exec(url);
  if (own) return `${own[1]}/${own[2]!.replace(/\.ts$/, '')}`;
  if (url.startsWith('node:')) return 'node:internal';
  return url.replace(/^file:\/\//, '');
}

/** The layer a sample's time belongs to; null for idle time. */
function layerOf(stack: ProfileNode[]): string | null {
  const leaf = stack[0]!.callFrame.functionName;
  if (leaf === '(idle)') return null;
  if (leaf === '(garbage collector)' || leaf === '(program)') return leaf;
  if (stack.some((n) => n.callFrame.url.includes('zlib'))) return 'compression (zlib)';
  const places = stack.map((n) => placeOf(n.callFrame.url, n.callFrame.functionName));
  if (['writev', 'writeBuffer', 'writeUtf8String', 'writeLatin1String'].includes(leaf)) {
    return places.some((p) => p === 'pg' || p === 'pg-protocol') ? 'socket writes to PostgreSQL' : 'socket writes to the client';
  }
  const owner = places.find((p) => !p.startsWith('(') && p !== 'node:internal');
  if (!owner) return `node internals (${leaf || '(anonymous)'})`;
  if (/^(pg|pg-protocol|pg-types|pg-pool)$/.test(owner)) return 'pg (protocol, rows)';
  if (owner === 'kysely' || owner.startsWith('@mikro-orm') || owner === 'src/db') return 'Kysely, MikroORM, src/db';
  if (owner === 'tsx' || owner === 'esbuild') return 'tsx (compiling sources)';
  return owner;
}

const [file, topArg, skipArg] = process.argv.slice(2);
if (!file) {
  process.stderr.write('usage: profile-summary.ts <file.cpuprofile> [top] [skip seconds]\n');
  process.exit(2);
}
const profile = JSON.parse(fs.readFileSync(file, 'utf8')) as Profile;
const byId = new Map(profile.nodes.map((n) => [n.id, n]));
const parentOf = new Map<number, number>();
for (const node of profile.nodes) for (const child of node.children ?? []) parentOf.set(child, node.id);
const inclusive = new Map<string, number>();
const byPlace = new Map<string, number>();
const byFunction = new Map<string, number>();
const byLayer = new Map<string, number>();
const skipMicros = Number(skipArg ?? 0) * 1e6;
let total = 0;
let at = 0;
profile.samples.forEach((id, i) => {
  const node = byId.get(id)!;
  const micros = profile.timeDeltas[i] ?? 0;
  at += micros;
  if (at < skipMicros) return;
  total += micros;
  const { functionName, url } = node.callFrame;
  const place = placeOf(url, functionName);
  byPlace.set(place, (byPlace.get(place) ?? 0) + micros);
  if (place === '(idle)') return;
  // Line numbers of bundled dependencies and transpiled sources say little; the name and place do.
  const name = `${functionName || '(anonymous)'} ${place}`;
  byFunction.set(name, (byFunction.get(name) ?? 0) + micros);
  const stack: ProfileNode[] = [];
  for (let up: number | undefined = id; up !== undefined; up = parentOf.get(up)) stack.push(byId.get(up)!);
  const layer = layerOf(stack);
  if (layer) byLayer.set(layer, (byLayer.get(layer) ?? 0) + micros);
  const onStack = new Set<string>();
  for (const { callFrame: frame } of stack) {
    const where = placeOf(frame.url, frame.functionName);
    if (where.startsWith('src/')) onStack.add(`${frame.functionName || '(anonymous)'} ${where}`);
  }
  for (const own of onStack) inclusive.set(own, (inclusive.get(own) ?? 0) + micros);
});
const busy = total - (byPlace.get('(idle)') ?? 0);
const line = ([name, micros]: [string, number]) =>
  `${((micros / busy) * 100).toFixed(1).padStart(5)}%  ${(micros / 1000).toFixed(0).padStart(7)} ms  ${name}`;
const top = Number(topArg ?? 30);
const sorted = (m: Map<string, number>) => [...m].filter(([k]) => k !== '(idle)').sort((a, b) => b[1] - a[1]);
process.stdout.write(
  [
    `${(total / 1e6).toFixed(1)} s profiled${skipMicros > 0 ? ` after the first ${skipMicros / 1e6} s` : ''}, ${(busy / 1e6).toFixed(1)} s busy (shares below are of busy time)`,
    '',
    'Self time by place:',
    ...sorted(byPlace).slice(0, top).map(line),
    '',
    `Top ${top} functions by self time:`,
    ...sorted(byFunction).slice(0, top).map(line),
    '',
    `Top ${top} of this project's functions by inclusive time:`,
    ...sorted(inclusive).slice(0, top).map(line),
    '',
    'Busy time by layer (native and Node-internal time counted for the layer it works for):',
    ...sorted(byLayer).slice(0, top).map(line),
    '',
  ].join('\n'),
);
