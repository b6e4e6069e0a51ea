/**
 * At most `limit` tasks at once, the rest first come, first served. The sandbox server puts
 * every slot namespace's start-up through one (spawner.ts): a burst of first calls (hundreds
 * of slots on a loaded node) then waits its turn instead of every start-up competing for
 * the CPU until each runs out of its own start-up timeout. A loaded node is slower, not
 * failing.
 */
export class StartGate {
  private active = 0;
  private readonly waiting: Array<() => void> = [];

  constructor(private readonly limit: number) {}

  async run<T>(task: () => Promise<T>): Promise<T> {
    if (this.active < this.limit) this.active++;
    else await new Promise<void>((resolve) => this.waiting.push(resolve));
    try {
      return await task();
    } finally {
      // Hand the place to the next in line, or give it back.
      const next = this.waiting.shift();
      if (next) next();
      else this.active--;
    }
  }
}
