/**
 * `npm run bench:table [results.json]`: publishes a run's results. Copies the given results
 * file (default bench/results.json, the last run's) to bench/published-results.json, the
 * committed one, and writes the README's benchmark table from it, between its markers.
 * test/docs/bench-table.test.ts fails when the two disagree.
 */
import fs from 'node:fs';
import path from 'node:path';
import { readmeTable, replaceReadmeTable, type Results } from './results';

const root = path.resolve(__dirname, '..');
const published = path.join(__dirname, 'published-results.json');
const source = process.argv[2] ? path.resolve(process.argv[2]) : path.join(__dirname, 'results.json');
const results = JSON.parse(fs.readFileSync(source, 'utf8')) as Results;
if (source !== published) fs.writeFileSync(published, `${JSON.stringify(results, null, 2)}\n`);
const readmePath = path.join(root, 'README.md');
fs.writeFileSync(readmePath, replaceReadmeTable(fs.readFileSync(readmePath, 'utf8'), readmeTable(results)));
process.stdout.write(`README.md: benchmark table from ${path.relative(root, published)} (${results.figures.length} rows, run of ${results.generatedAt})\n`);
