/**
 * What one trajectory can leave to the next one on the same slot: nothing after a release
 * with reset (the default), everything — files and its terminal session's processes — after
 * `reset_workspace: false` (the original API's option, for envs that reuse a prepared
 * workspace). Through the executor service with one slot, so B surely gets A's slot.
 */
import { chmodSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { processesWithMarker, startCliServer, type CliServer } from "./support.js";

const TOKEN = "release-reset-token-7d";
let exec: CliServer;
let base: string;

beforeAll(async () => {
  base = mkdtempSync(join(tmpdir(), "slotpool-release-"));
  chmodSync(base, 0o755);
  exec = await startCliServer(["executor-server", "--port", "0", "--token", TOKEN, "--provisioner", "local", "--slots-per-container", "1", "--min-containers", "1", "--max-containers", "1", "--data-dir", join(base, "data"), "--no-network", "--require-sandbox"], { startTimeoutMs: 60_000 });
}, 90_000);
afterAll(async () => {
  await exec?.stop(15_000);
  if (base) rmSync(base, { recursive: true, force: true });
});

async function post(path: string, body: unknown): Promise<any> {
  const res = await fetch(exec.url + path, { method: "POST", headers: { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" }, body: JSON.stringify(body) });
  return res.json();
}
const call = (t: string, name: string, args: Record<string, unknown>) => post("/execute", { trajectory_id: t, tool: { name, arguments: args } });

async function plant(t: string, marker: string): Promise<void> {
  expect((await call(t, "write_file", { path: "left-behind.txt", content: marker })).success).toBe(true);
  const r = await call(t, "bash_stateful", { command: `(exec -a ${marker} sleep 300) & disown; echo planted` });
  expect(r.output, JSON.stringify(r)).toBe("planted");
  // The background subshell execs into the marked process after "planted" is printed;
  // on a loaded machine that can take a moment, so wait for it (bounded).
  expect(await markedProcessesWithin(marker, 1, 5_000)).toHaveLength(1);
}

async function markedProcessesWithin(marker: string, want: number, ms: number) {
  const deadline = Date.now() + ms;
  let found = processesWithMarker(marker);
  while (found.length !== want && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 50));
    found = processesWithMarker(marker);
  }
  return found;
}

describe("what a released slot hands to the next trajectory", () => {
  it("release with reset (the default): the next trajectory finds no file and no process of the previous one", async () => {
    const marker = `slotpool-prev-${process.pid}-a`;
    await plant("prev-a", marker);
    expect(await post("/release", { trajectory_id: "prev-a", reset_workspace: true })).toEqual({ status: "ok" });
    const next = await call("next-a", "bash", { command: "ls -A /workspace | grep -v '^.slotpool' | wc -l" });
    expect(next.output.split("\n")[0]).toBe("0");
    expect(processesWithMarker(marker)).toEqual([]);
    await post("/release", { trajectory_id: "next-a", reset_workspace: true });
  }, 60_000);

  it("release with reset_workspace: false: the next trajectory inherits the files and the session's processes", async () => {
    const marker = `slotpool-prev-${process.pid}-b`;
    await plant("prev-b", marker);
    await post("/release", { trajectory_id: "prev-b", reset_workspace: false });
    const next = await call("next-b", "bash_stateful", { command: "cat left-behind.txt" });
    expect(next.output).toContain(marker);
    expect(processesWithMarker(marker)).toHaveLength(1);
    await post("/release", { trajectory_id: "next-b", reset_workspace: true });
    expect(processesWithMarker(marker)).toEqual([]);
  }, 60_000);
});
