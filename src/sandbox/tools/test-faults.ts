import { readdirSync, readFileSync, unlinkSync } from "node:fs";
import { join } from "node:path";

/**
 * Test-only fault injection for the infra-failure tests (test/faults/infra-causes.test.ts,
 * the multi-node cluster tests): with `SLOTPOOL_TEST_FAULTS_DIR` set, each file in that
 * directory is one fault, its content `KIND MARKER`. The first `bash` or `bash_stateful` command (of any server
 * reading the directory) whose text contains MARKER takes the fault: the server that deletes
 * the file first fires it, so a fault fires once however many servers and restarts there are.
 *
 * - `sandbox_start`: the command's sandbox "did not start" (the path a real start-up timeout takes);
 * - `reset`: the slot is killed from outside 300 ms after the command starts (as a POST /reset does);
 * - `shutdown`: the server gets SIGINT 300 ms after the command starts (as a node shutting down does).
 *
 * Unset (always, outside tests), this costs one environment lookup per call.
 */
export type InjectedFault = "sandbox_start" | "reset" | "shutdown";
const KINDS: readonly string[] = ["sandbox_start", "reset", "shutdown"];

export function takeInjectedFault(command: string): InjectedFault | undefined {
  const dir = process.env["SLOTPOOL_TEST_FAULTS_DIR"];
  if (!dir) return undefined;
  let names: string[];
  try {
    names = readdirSync(dir);
  } catch {
    return undefined;
  }
  for (const name of names) {
    const path = join(dir, name);
    let kind: string, marker: string | undefined;
    try {
      [kind = "", marker] = readFileSync(path, "utf8").trim().split(/\s+/, 2);
    } catch {
      continue; // taken by another server meanwhile
    }
    if (!marker || !KINDS.includes(kind) || !command.includes(marker)) continue;
    try {
      unlinkSync(path);
    } catch {
      continue;
    }
    return kind as InjectedFault;
  }
  return undefined;
}
