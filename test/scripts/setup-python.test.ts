/**
 * Issue 39, item 5: `scripts/setup.sh` was silent for ~70 s while pip ran. setup-python.sh
 * says what it is installing before pip starts, and how it ended. Run on a copy of the script
 * whose package index cannot be reached (a closed port on loopback), so pip fails fast.
 */
import { execFile } from "node:child_process";
import { existsSync } from "node:fs";
import { cp, mkdir, mkdtemp, readFile, rm, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { spawnSync } from "node:child_process";

const exec = promisify(execFile);
const ROOT = fileURLToPath(new URL("../../", import.meta.url));
/**
 * A Python with pip to stand in for the virtualenv (making a real one costs half a minute on a
 * loaded box, and is not what this test is about): the tests' own, else the system's.
 */
const REPO_VENV = join(ROOT, ".build", "python", "bin", "python");
const python = existsSync(REPO_VENV) ? REPO_VENV : spawnSync("python3", ["-m", "pip", "--version"]).status === 0 ? "/usr/bin/python3" : undefined;

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "setup-python-"));
  await mkdir(join(dir, "scripts"), { recursive: true });
  await mkdir(join(dir, "test", "python"), { recursive: true });
  await cp(join(ROOT, "scripts", "setup-python.sh"), join(dir, "scripts", "setup-python.sh"));
  // A requirement nothing here satisfies, so pip must ask the (unreachable) index, whatever is installed.
  await writeFile(join(dir, "test", "python", "requirements.txt"), "# pinned\nslotpool-no-such-package==0.0.1\n");
  // The script's virtualenv, already there (no stamp: it installs the requirements with it).
  if (python) {
    await mkdir(join(dir, ".build", "python", "bin"), { recursive: true });
    await symlink(python, join(dir, ".build", "python", "bin", "python"));
  }
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe("scripts/setup-python.sh", () => {
  it.skipIf(!python)("says what it installs before pip's quiet minute, and how it ended (here: no package index) — skipped without a Python with pip", async () => {
    const r = await exec("bash", [join(dir, "scripts", "setup-python.sh")], {
      cwd: dir,
      // Nothing listens on port 9: pip gives up at once instead of after its retries.
      env: { ...process.env, PIP_INDEX_URL: "http://127.0.0.1:9/simple", PIP_RETRIES: "0", PIP_TIMEOUT: "2", PIP_NO_CACHE_DIR: "1" },
    });
    const lines = r.stderr.trim().split("\n");
    expect(lines[0]).toMatch(/^setup-python: python: installing 1 pinned packages \(test\/python\/requirements\.txt\) into \.build\/python with pip; this takes a minute or two \(log: \.build\/python-pip\.log\)…$/);
    expect(lines.at(-1)).toMatch(/^setup-python: python: pip could not install test\/python\/requirements\.txt from the package index after \d+ s \(see \.build\/python-pip\.log\) \(the tests that need it will skip\)$/);
    expect(await readFile(join(dir, ".build", "python.unavailable"), "utf8")).toMatch(/pip could not install/);
  }, 120_000);
});
