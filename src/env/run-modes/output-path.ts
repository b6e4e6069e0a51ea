import { existsSync } from "node:fs";
import { mkdir, open, stat } from "node:fs/promises";
import { basename, dirname, extname, join, resolve } from "node:path";
import { EnvError } from "../errors.js";

/** `data/x.jsonl` → `data/x_1.jsonl` → `data/x_2.jsonl` … until the name is free. */
export function freeOutputPath(path: string): string {
  if (!existsSync(path)) return path;
  const ext = extname(path);
  const stem = basename(path, ext);
  for (let i = 1; ; i++) {
    const candidate = join(dirname(path), `${stem}_${i}${ext}`);
    if (!existsSync(candidate)) return candidate;
  }
}

/** The output cannot be written where asked; the message names the path and why. */
export class OutputPathError extends EnvError {
  override name = "OutputPathError";
}

/**
 * Creates the directories of `dir` one level at a time. (A recursive mkdir under /proc
 * never returns, spinning a core; one level at a time fails at once with ENOENT.)
 */
export async function makeDirectories(dir: string): Promise<void> {
  const missing: string[] = [];
  for (let d = resolve(dir); ; d = dirname(d)) {
    try {
      if (!(await stat(d)).isDirectory()) throw new OutputPathError(`${d} is not a directory`);
      break;
    } catch (err) {
      if (err instanceof OutputPathError) throw err;
      // ENOTDIR: a file on the way (README.md/x); the walk up finds and names it.
      if (!["ENOENT", "ENOTDIR"].includes((err as NodeJS.ErrnoException).code ?? "")) throw new OutputPathError(`cannot use ${d}: ${(err as Error).message}`);
      missing.unshift(d);
      if (dirname(d) === d) break;
    }
  }
  for (const d of missing) {
    try {
      await mkdir(d);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== "EEXIST") throw new OutputPathError(`cannot create the directory ${d}: ${(err as Error).message}`);
    }
  }
}

/**
 * Before any work: the free name for `path` (see freeOutputPath), its directories made and
 * the file created empty, so a path that cannot be written fails before the pool starts.
 */
export async function prepareOutputFile(path: string): Promise<string> {
  await makeDirectories(dirname(path));
  const target = freeOutputPath(path);
  try {
    await (await open(target, "wx")).close();
  } catch (err) {
    throw new OutputPathError(`cannot write ${target}: ${(err as Error).message}`);
  }
  return target;
}

