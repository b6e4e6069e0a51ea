/**
 * Which test files behave differently for a non-root user — the ones CI runs a second time as
 * one (`.ci/run`, step 3). The rest run as root only: running them again as another user tests
 * the same code the same way, and costs CI a quarter of an hour (issue 39).
 *
 * The list is computed, not kept by hand, so it cannot go stale:
 *
 * - every file under test/sandbox/, test/security/ and test/host/: the sandbox server and the
 *   host's isolation are what differs by user (slot uids, cgroups or rlimits, mounts in the
 *   server's own user namespace, who may read what);
 * - every other test file whose code asks who runs it (`process.getuid`, `geteuid`, `isRoot`,
 *   `runuser`): it asserts one thing as root and another as not, so both must run;
 * - a file that says so in a comment, `// runs as each user: <why>` (its behaviour differs by
 *   user though its code does not branch: e.g. an SDK's file permissions in a slot);
 * - never test/architecture/ (static checks of the sources: the same for everyone).
 *
 * `node --import tsx test/architecture/user-dependence.ts` prints the list, one path a line
 * (what .ci/run passes to vitest for the non-root run); test/architecture/user-dependence.test.ts
 * checks the rule and that .ci/run uses it.
 */
import { readdirSync, readFileSync } from "node:fs";
import { join, relative } from "node:path";
import { fileURLToPath } from "node:url";

export const EACH_USER_DIRS = ["test/sandbox/", "test/security/", "test/host/"] as const;
const STATIC_DIRS = ["test/architecture/"];
const ASKS_WHO = /process\.getuid|process\.geteuid|\bisRoot\b|\brunuser\b/;
const SAYS_SO = /\/\/ runs as each user: \S/;

/** Whether a test file (path relative to the root, its text) must run as non-root too, and why. */
export function differsByUser(file: string, text: string): { differs: boolean; why: string } {
  if (STATIC_DIRS.some((d) => file.startsWith(d))) return { differs: false, why: "static checks of the sources" };
  const dir = EACH_USER_DIRS.find((d) => file.startsWith(d));
  if (dir) return { differs: true, why: `under ${dir}` };
  if (ASKS_WHO.test(text)) return { differs: true, why: "its code asks who runs it" };
  if (SAYS_SO.test(text)) return { differs: true, why: "it says so (// runs as each user: …)" };
  return { differs: false, why: "the same for every user" };
}

/** The suite's test files (vitest's include: test/**\/*.test.ts, less its excludes). */
export function testFiles(root: string): string[] {
  const out: string[] = [];
  const walk = (dir: string) => {
    for (const e of readdirSync(dir, { withFileTypes: true })) {
      const p = join(dir, e.name);
      const rel = relative(root, p);
      if (e.isDirectory()) {
        if (rel !== "test/bench" && rel !== "test/e2b/upstream") walk(p);
      } else if (e.name.endsWith(".test.ts")) out.push(rel);
    }
  };
  walk(join(root, "test"));
  return out.sort();
}

/** The test files CI runs a second time as a non-root user. */
export function nonRootTests(root: string): string[] {
  return testFiles(root).filter((f) => differsByUser(f, readFileSync(join(root, f), "utf8")).differs);
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const root = fileURLToPath(new URL("../..", import.meta.url));
  process.stdout.write(nonRootTests(root).join("\n") + "\n");
}
