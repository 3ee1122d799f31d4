import { GroupCommit } from '../../src/delivery/group-commit';

/** A write the test lets finish when it chooses: it records what went together. */
function heldWrites() {
  const writes: { items: string[]; finish: (error?: Error) => void }[] = [];
  let written: () => void = () => undefined;
  const write = (items: string[]) =>
    new Promise<string[]>((resolve, reject) => {
      writes.push({ items, finish: (error) => (error ? reject(error) : resolve(items.map((i) => `${i}:ok`))) });
      written();
    });
  const nextWrite = () => new Promise<void>((resolve) => (written = resolve));
  return { writes, write, nextWrite };
}

it('writes a lone item at once, and the items that arrive meanwhile together in the next write', async () => {
  const { writes, write, nextWrite } = heldWrites();
  const group = new GroupCommit(write, (item: string) => item.split('/')[0]!);
  let next = nextWrite();
  const first = group.submit('a/1');
  await next;
  expect(writes.map((w) => w.items)).toEqual([['a/1']]);
  const waiting = [group.submit('b/1'), group.submit('c/1'), group.submit('d/1')];
  next = nextWrite();
  writes[0]!.finish();
  expect(await first).toBe('a/1:ok');
  await next;
  expect(writes.map((w) => w.items)).toEqual([['a/1'], ['b/1', 'c/1', 'd/1']]);
  writes[1]!.finish();
  expect(await Promise.all(waiting)).toEqual(['b/1:ok', 'c/1:ok', 'd/1:ok']);
});

it('never puts two items about the same delivery in one write', async () => {
  const { writes, write, nextWrite } = heldWrites();
  const group = new GroupCommit(write, (item: string) => item.split('/')[0]!);
  let next = nextWrite();
  const first = group.submit('x/0');
  await next;
  const waiting = [group.submit('a/1'), group.submit('a/2'), group.submit('b/1')];
  next = nextWrite();
  writes[0]!.finish();
  await first;
  await next;
  expect(writes[1]!.items).toEqual(['a/1', 'b/1']);
  next = nextWrite();
  writes[1]!.finish();
  await next;
  expect(writes[2]!.items).toEqual(['a/2']);
  writes[2]!.finish();
  expect(await Promise.all(waiting)).toEqual(['a/1:ok', 'a/2:ok', 'b/1:ok']);
});

it('fails every item of a failed write, and only those', async () => {
  const { writes, write, nextWrite } = heldWrites();
  const group = new GroupCommit(write, (item: string) => item);
  let next = nextWrite();
  const first = group.submit('a');
  await next;
  const second = group.submit('b');
  next = nextWrite();
  writes[0]!.finish(new Error('connection refused'));
  await expect(first).rejects.toThrow('connection refused');
  await next;
  writes[1]!.finish();
  expect(await second).toBe('b:ok');
});

it('with two writers, writes at once while one write is in flight, and groups behind two', async () => {
  const { writes, write, nextWrite } = heldWrites();
  const group = new GroupCommit(write, (item: string) => item, 2);
  let next = nextWrite();
  const first = group.submit('a');
  await next;
  next = nextWrite();
  const second = group.submit('b');
  await next;
  const waiting = [group.submit('c'), group.submit('d')];
  expect(writes.map((w) => w.items)).toEqual([['a'], ['b']]);
  next = nextWrite();
  writes[0]!.finish();
  await next;
  expect(writes[2]!.items).toEqual(['c', 'd']);
  writes[1]!.finish();
  writes[2]!.finish();
  expect(await Promise.all([first, second, ...waiting])).toEqual(['a:ok', 'b:ok', 'c:ok', 'd:ok']);
});
