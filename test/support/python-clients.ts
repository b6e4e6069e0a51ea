// The virtualenv that scripts/setup-python.sh builds from test/python/requirements.txt:
// the real Python clients our users run (E2B's SDK, the OpenEnv client). Tests that need
// one skip, saying why, when the set-up could not install it (no package index, no venv).
import { existsSync, readFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const repo = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");
const venv = join(repo, ".build", "python");

/** The venv's python, or null with the reason it is missing (for `it.skipIf`'s message). */
export function pythonClients(): { python: string; reason: null } | { python: null; reason: string } {
  const python = join(venv, "bin", "python");
  const unavailable = join(repo, ".build", "python.unavailable");
  if (existsSync(unavailable)) return { python: null, reason: readFileSync(unavailable, "utf8").trim() };
  if (!existsSync(python)) return { python: null, reason: "the Python clients are not installed: run ./scripts/setup.sh (it runs scripts/setup-python.sh)" };
  return { python, reason: null };
}

