/**
 * Writes that arrive while `concurrency` writes are in flight wait for one of them and then
 * go together, in one statement: concurrent attempts share their round trips to PostgreSQL
 * instead of queueing for connections one by one. A lone write goes at once, so nothing
 * waits when the engine is quiet.
 *
 * Two writes about the same delivery never share a statement (`keyOf`): an UPDATE … FROM
 * would apply only one of them; the later one goes in the next.
 */
export class GroupCommit<I, R> {
  private queue: { item: I; resolve: (result: R) => void; reject: (error: unknown) => void }[] = [];
  private writing = 0;

  constructor(
    private readonly write: (items: I[]) => Promise<R[]>,
    private readonly keyOf: (item: I) => string,
    private readonly concurrency = 1,
  ) {}

  submit(item: I): Promise<R> {
    return new Promise<R>((resolve, reject) => {
      this.queue.push({ item, resolve, reject });
      if (this.writing < this.concurrency) void this.drain();
    });
  }

  private async drain(): Promise<void> {
    this.writing += 1;
    try {
      while (this.queue.length > 0) {
        const keys = new Set<string>();
        const batch: typeof this.queue = [];
        const later: typeof this.queue = [];
        for (const entry of this.queue) {
          const key = this.keyOf(entry.item);
          if (keys.has(key)) later.push(entry);
          else {
            keys.add(key);
            batch.push(entry);
          }
        }
        this.queue = later;
        try {
          const results = await this.write(batch.map((entry) => entry.item));
          batch.forEach((entry, i) => entry.resolve(results[i]!));
        } catch (error) {
          // Each caller decides what a failed write means to it (PostgreSQL unreachable: it submits again).
          for (const entry of batch) entry.reject(error);
        }
      }
    } finally {
      this.writing -= 1;
    }
  }
}
