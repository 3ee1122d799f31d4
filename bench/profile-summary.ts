/**
 * Summarises a V8 CPU profile (`node --cpu-prof`, e.g. the service run with
 * BENCH_SERVER_NODE_ARGS="--cpu-prof --cpu-prof-dir=/tmp/prof") as text: self time by
 * where the code lives (this project's modules, each dependency, Node's internals, the
 * garbage collector), the functions with the most self time, and the inclusive time of
 * this project's own functions (a function's share of the samples it is on the stack of).
 *
 *   scripts/with-node.sh tsx bench/profile-summary.ts /tmp/prof/CPU.*.cpuprofile [top]
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

const [file, topArg] = process.argv.slice(2);
if (!file) {
  process.stderr.write('usage: profile-summary.ts <file.cpuprofile> [top]\n');
  process.exit(2);
}
const profile = JSON.parse(fs.readFileSync(file, 'utf8')) as Profile;
const byId = new Map(profile.nodes.map((n) => [n.id, n]));
const parentOf = new Map<number, number>();
for (const node of profile.nodes) for (const child of node.children ?? []) parentOf.set(child, node.id);
const inclusive = new Map<string, number>();
const byPlace = new Map<string, number>();
const byFunction = new Map<string, number>();
let total = 0;
profile.samples.forEach((id, i) => {
  const node = byId.get(id)!;
  const micros = profile.timeDeltas[i] ?? 0;
  total += micros;
  const { functionName, url } = node.callFrame;
  const place = placeOf(url, functionName);
  byPlace.set(place, (byPlace.get(place) ?? 0) + micros);
  if (place === '(idle)') return;
  // Line numbers of bundled dependencies and transpiled sources say little; the name and place do.
  const name = `${functionName || '(anonymous)'} ${place}`;
  byFunction.set(name, (byFunction.get(name) ?? 0) + micros);
  const onStack = new Set<string>();
  for (let at: number | undefined = id; at !== undefined; at = parentOf.get(at)) {
    const frame = byId.get(at)!.callFrame;
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
    `${(total / 1e6).toFixed(1)} s profiled, ${(busy / 1e6).toFixed(1)} s busy (shares below are of busy time)`,
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
  ].join('\n'),
);
