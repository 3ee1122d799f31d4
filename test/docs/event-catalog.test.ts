import { readFileSync } from 'node:fs';
import { README, catalogMarkdown } from '../../scripts/event-catalog-doc';

describe("the README's event catalog", () => {
  it('is the one written from the schemas ListEventTypes serves', () => {
    expect(readFileSync(README, 'utf8')).toContain(catalogMarkdown());
  });
});
