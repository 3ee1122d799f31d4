/**
 * Polls `probe` every 20 ms until it holds or `ms` have passed; says whether it held.
 * For effects that travel between processes (a PostgreSQL notice reaching the service),
 * with a deadline far below the time after which the effect would come about anyway.
 */
export async function within(ms: number, probe: () => Promise<boolean>): Promise<boolean> {
  const deadline = Date.now() + ms;
  for (;;) {
    if (await probe()) return true;
    if (Date.now() > deadline) return false;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}
