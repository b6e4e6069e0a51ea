/**
 * Issue 39, item 5: `scripts/setup.sh` was silent for ~70 s while pip ran. setup-python.sh
 * says what it is installing before pip starts, and how it ended. Run on a copy of the script
 * whose package index cannot be reached (a closed port on loopback), so pip fails fast.
 */
import { execFile } from "node:child_process";
import { cp, mkdir, mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { spawnSync } from "node:child_process";

const exec = promisify(execFile);
const ROOT = fileURLToPath(new URL("../../", import.meta.url));
const noVenv = spawnSync("python3", ["-c", "import ensurepip, venv"]).status !== 0;

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "setup-python-"));
  await mkdir(join(dir, "scripts"), { recursive: true });
  await mkdir(join(dir, "test", "python"), { recursive: true });
  await cp(join(ROOT, "scripts", "setup-python.sh"), join(dir, "scripts", "setup-python.sh"));
  await cp(join(ROOT, "test", "python", "requirements.txt"), join(dir, "test", "python", "requirements.txt"));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe("scripts/setup-python.sh", () => {
  it.skipIf(noVenv)("says what it installs before pip's quiet minute, and how it ended (here: no package index) — skipped without python3's venv", async () => {
    const r = await exec("bash", [join(dir, "scripts", "setup-python.sh")], {
      cwd: dir,
      // Nothing listens on port 9: pip gives up at once instead of after its retries.
      env: { ...process.env, PIP_INDEX_URL: "http://127.0.0.1:9/simple", PIP_RETRIES: "0", PIP_TIMEOUT: "2", PIP_NO_CACHE_DIR: "1" },
    });
    const lines = r.stderr.trim().split("\n");
    expect(lines[0]).toMatch(/^setup-python: installing the tests' \d+ pinned Python clients \(test\/python\/requirements\.txt\) into \.build\/python with pip; this takes a minute or two \(log: \.build\/python-pip\.log\)…$/);
    expect(lines.at(-1)).toMatch(/^setup-python: pip could not install test\/python\/requirements\.txt from the package index after \d+ s \(see \.build\/python-pip\.log\) \(the tests that need the Python clients will skip\)$/);
    expect(await readFile(join(dir, ".build", "python.unavailable"), "utf8")).toMatch(/pip could not install/);
  }, 120_000);
});
