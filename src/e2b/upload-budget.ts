import { E2bApiError } from "./errors.js";

/**
 * Bytes held in memory at once by uploads in flight: server-wide and per sandbox. Each
 * upload takes what it reads as it reads it (and what gzip expands it to) and gives it all
 * back when it ends; one that would pass either bound is refused with 429 naming it, so
 * many concurrent uploads cannot grow the server without limit.
 */
export class UploadBudget {
  private total = 0;
  private readonly perKey = new Map<string, number>();

  constructor(
    readonly maxTotal: number,
    readonly maxPerKey: number,
  ) {}

  /** A holder for one upload of `key` (a sandbox id): `take` as it reads, `release` once at its end. */
  open(key: string): BudgetLease {
    let held = 0;
    return {
      take: (n: number) => {
        const mine = this.perKey.get(key) ?? 0;
        if (mine + n > this.maxPerKey) {
          throw new E2bApiError(429, `this sandbox's uploads in flight would hold more than ${this.maxPerKey} bytes (--sandbox-upload-budget-mb): wait for its other uploads to finish`);
        }
        if (this.total + n > this.maxTotal) {
          throw new E2bApiError(429, `uploads in flight on this server would hold more than ${this.maxTotal} bytes (--upload-budget-mb): retry shortly`);
        }
        this.total += n;
        this.perKey.set(key, mine + n);
        held += n;
      },
      release: () => {
        this.total -= held;
        const left = (this.perKey.get(key) ?? 0) - held;
        if (left > 0) this.perKey.set(key, left);
        else this.perKey.delete(key);
        held = 0;
      },
    };
  }

  /** Bytes held now (server-wide). */
  get inFlight(): number {
    return this.total;
  }
}

export interface BudgetLease {
  take(n: number): void;
  release(): void;
}
