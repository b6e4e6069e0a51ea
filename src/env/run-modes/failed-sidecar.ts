import { open, type FileHandle } from "node:fs/promises";
import type { FailedTrajectory } from "../infra-failure.js";

/**
 * The run's sidecar of unscored trajectories (`run.failed.jsonl` beside `run.jsonl`): one JSON
 * line per trajectory that was not scored, with why, the stack of the env's code that threw,
 * its transcript and reward calls, and its item. Made at the first such trajectory (a clean
 * run leaves none); never part of the training data.
 */
export class FailedSidecar {
  private file: Promise<FileHandle> | undefined;
  private writes: Promise<unknown> = Promise.resolve();
  written = 0;

  constructor(readonly path: string) {}

  add(records: readonly FailedTrajectory[], item: unknown): Promise<void> {
    if (records.length === 0) return Promise.resolve();
    const itemJson = jsonOrUndefined(item);
    const lines = records.map((r) => JSON.stringify({ ...r, ...(itemJson !== undefined ? { item: itemJson } : {}) }) + "\n").join("");
    this.file ??= open(this.path, "w");
    const file = this.file;
    this.writes = this.writes.then(async () => (await file).write(lines));
    this.written += records.length;
    return this.writes.then(() => undefined);
  }

  async close(): Promise<void> {
    await this.writes.catch(() => undefined);
    if (this.file) await (await this.file).close();
  }
}

/** The item as JSON data, when it is (an item holding functions or cycles is left out). */
function jsonOrUndefined(item: unknown): unknown {
  try {
    const text = JSON.stringify(item);
    return text === undefined ? undefined : (JSON.parse(text) as unknown);
  } catch {
    return undefined;
  }
}
