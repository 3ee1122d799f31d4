/**
 * The README's benchmark table is generated from the committed results
 * (bench/published-results.json, by `npm run bench:table`): it cannot show figures no run
 * measured, nor lose rows a run did.
 */
import fs from 'node:fs';
import path from 'node:path';
import { README_TABLE_END, README_TABLE_START, readmeTable, type Results } from '../../bench/results';

const ROOT = path.resolve(__dirname, '../..');

describe('README benchmark table', () => {
  const readme = fs.readFileSync(path.join(ROOT, 'README.md'), 'utf8');
  const results = JSON.parse(fs.readFileSync(path.join(ROOT, 'bench/published-results.json'), 'utf8')) as Results;

  it('is the table generated from the committed results', () => {
    const start = readme.indexOf(README_TABLE_START);
    const end = readme.indexOf(README_TABLE_END);
    expect(start).toBeGreaterThanOrEqual(0);
    expect(end).toBeGreaterThan(start);
    expect(readme.slice(start, end + README_TABLE_END.length)).toBe(readmeTable(results));
  });

  it('has a row for every figure of the committed results, each with its spread and result', () => {
    const block = readme.slice(readme.indexOf(README_TABLE_START), readme.indexOf(README_TABLE_END));
    const rows = block.split('\n').filter((line) => line.startsWith('| ') && !line.startsWith('| Figure'));
    expect(rows).toHaveLength(results.figures.length);
    for (const row of rows) expect(row.split(' | ').length).toBe(9);
  });

  it('says when and on what the committed results were measured', () => {
    expect(results.machine.cpuCount).toBeGreaterThan(0);
    expect(results.machine.loadAverageAtStart).toHaveLength(3);
    expect(Date.parse(results.generatedAt)).not.toBeNaN();
  });
});
