// The virtualenvs that scripts/setup-python.sh builds from test/python/requirements*.txt: the
// real Python clients our users run (E2B's SDK and the OpenEnv client in .build/python; the MCP
// SDK, the trainers' libraries and NeMo Gym's models each in their own, as their pins conflict).
// Tests that need one skip, saying why, when the set-up could not install it (no package index,
// no venv, no Python 3.13).
import { existsSync, readFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const repo = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");

/** The venvs of scripts/setup-python.sh, by directory name under .build/. */
export type PythonVenv = "python" | "python-mcp" | "python-trainers" | "python-nemo-gym" | "python-harbor";

/** The venv's python, or null with the reason it is missing (for `it.skipIf`'s message). */
export function pythonClients(venv: PythonVenv = "python"): { python: string; reason: null } | { python: null; reason: string } {
  const python = join(repo, ".build", venv, "bin", "python");
  const unavailable = join(repo, ".build", `${venv}.unavailable`);
  if (existsSync(unavailable)) return { python: null, reason: readFileSync(unavailable, "utf8").trim() };
  if (!existsSync(python)) return { python: null, reason: `the Python clients of .build/${venv} are not installed: run ./scripts/setup.sh (it runs scripts/setup-python.sh)` };
  return { python, reason: null };
}
