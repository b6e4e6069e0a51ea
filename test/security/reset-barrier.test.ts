/**
 * Reset is a barrier (issue 11, hole 1): when `/reset`, or the executor's `/release` (the
 * pool's release with reset), answers, no process of the slot runs and the workspace is
 * empty, and nothing of the previous trajectory appears afterwards, even a loop that was
 * creating files as fast as it could. Checked at once (no sleep) and again 200 ms later.
 */
import { chmodSync, mkdtempSync, readdirSync, readFileSync, readlinkSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startAttackServer, startCliServer, type AttackServer, type CliServer } from "./support.js";
import { serverView } from "../support/server-view.js";

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * Running (not zombie) processes of the previous trajectory: those whose command line holds
 * `marker`, and any process inside one of the PID namespaces `namespaces` (the slot's
 * namespaces before the reset; the fresh namespace a reset starts for the next trajectory
 * is another one).
 */
function slotProcesses(marker: string, namespaces: Set<string> = new Set()): string[] {
  const found: string[] = [];
  for (const name of readdirSync("/proc")) {
    if (!/^\d+$/.test(name) || Number(name) === process.pid) continue;
    try {
      const status = readFileSync(`/proc/${name}/status`, "utf8");
      if (/\nState:\s+[ZX]/.test(status)) continue;
      const cmdline = readFileSync(`/proc/${name}/cmdline`, "utf8").replace(/\0/g, " ").trim();
      if (cmdline.includes(marker) || namespaces.has(pidNamespace(Number(name)))) found.push(`${name}: ${cmdline}`);
    } catch {
      /* exited meanwhile */
    }
  }
  return found;
}

function pidNamespace(pid: number): string {
  try {
    return readlinkSync(`/proc/${pid}/ns/pid`);
  } catch {
    return "";
  }
}

/** PID namespaces of the processes whose command line holds `marker`. */
function namespacesOf(marker: string): Set<string> {
  const own = pidNamespace(process.pid);
  const found = new Set<string>();
  for (const p of slotProcesses(marker)) {
    const ns = pidNamespace(Number(p.split(":")[0]));
    if (ns && ns !== own) found.add(ns);
  }
  return found;
}

/** The pid of the sandbox server whose data dir lies under `base` (the executor's local container). */
function sandboxServerUnder(base: string): number {
  for (const name of readdirSync("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const argv = readFileSync(`/proc/${name}/cmdline`, "utf8").split("\0");
      const dataDir = argv[argv.indexOf("--data-dir") + 1] ?? "";
      if (argv.includes("sandbox-server") && dataDir.startsWith(base + "/")) return Number(name);
    } catch {
      /* exited meanwhile */
    }
  }
  throw new Error(`no sandbox server with its data dir under ${base}`);
}

/** Every path under `dir` whose name holds `marker`. */
function filesWithMarker(dir: string, marker: string): string[] {
  try {
    return (readdirSync(dir, { recursive: true }) as string[]).filter((p) => p.includes(marker));
  } catch {
    return [];
  }
}

/**
 * A stateful command that leaves a loop creating marked files in the workspace (64 names,
 * recreated as soon as they are gone) and a marked `sleep`, and waits until the loop has
 * written at least one.
 */
const writerCommand = (marker: string) =>
  `bash -c 'i=0; while :; do : > /workspace/${marker}.$((i++ % 64)); done' ${marker}-loop & (exec -a ${marker}-sleep sleep 313) & ` +
  `for i in $(seq 200); do ls /workspace | grep -q ${marker} && break; sleep 0.01; done; echo started`;

describe("reset is a barrier", () => {
  let server: AttackServer;
  beforeAll(async () => {
    server = await startAttackServer({ slots: 2 });
  }, 90_000);
  afterAll(async () => {
    await server?.stop();
  });

  it("100 rounds: when /reset answers, no process of the slot runs and the workspace is empty, also 200 ms later", async () => {
    // Through the server's view: as root the workspace is its tmpfs, in its mount namespace.
    const workspace = serverView(server.proc.pid, join(server.dataDir, "slot_0"));
    for (let round = 0; round < 100; round++) {
      const marker = `slotpool-barrier-${process.pid}-${round}`;
      const planted = await server.tool(0, "bash_stateful", { command: writerCommand(marker), require_sandbox: true });
      expect(planted.output, JSON.stringify(planted)).toBe("started");
      const namespaces = namespacesOf(marker);
      expect(namespaces.size).toBeGreaterThan(0);
      // Control: the writer's files are where this test looks (so "empty" below means emptied).
      expect(filesWithMarker(workspace, marker).length, `round ${round}: no file of the writer seen in ${workspace}`).toBeGreaterThan(0);
      const reset = await server.reset(0);
      // At once: no sleep between the answer and these checks.
      const procsNow = slotProcesses(marker, namespaces);
      const filesNow = readdirSync(workspace);
      expect(reset.json?.success, reset.text).toBe(true);
      expect({ round, procs: procsNow, files: filesNow }).toEqual({ round, procs: [], files: [] });
      await sleep(200);
      expect({ round, procs: slotProcesses(marker, namespaces), files: filesWithMarker(workspace, marker) }).toEqual({ round, procs: [], files: [] });
    }
  }, 300_000);
});

describe("the executor's /release (the pool's release with reset) is a barrier too", () => {
  const TOKEN = "reset-barrier-token-41";
  let exec: CliServer;
  let base: string;
  beforeAll(async () => {
    base = mkdtempSync(join(tmpdir(), "slotpool-barrier-"));
    chmodSync(base, 0o755);
    exec = await startCliServer(
      ["executor-server", "--port", "0", "--token", TOKEN, "--provisioner", "local", "--slots-per-container", "1", "--min-containers", "1", "--max-containers", "1", "--data-dir", join(base, "data"), "--no-network", "--require-sandbox"],
      { startTimeoutMs: 60_000 },
    );
  }, 90_000);
  afterAll(async () => {
    await exec?.stop(15_000);
    if (base) rmSync(base, { recursive: true, force: true });
  });
  const post = async (path: string, body: unknown): Promise<any> => {
    const res = await fetch(exec.url + path, { method: "POST", headers: { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" }, body: JSON.stringify(body) });
    return res.json();
  };

  it("20 rounds: when /release answers, no process and no file of the trajectory is left, also 200 ms later", async () => {
    for (let round = 0; round < 20; round++) {
      const marker = `slotpool-release-barrier-${process.pid}-${round}`;
      const t = `traj-${round}`;
      const planted = await post("/execute", { trajectory_id: t, tool: { name: "bash_stateful", arguments: { command: writerCommand(marker) } } });
      expect(planted.output, JSON.stringify(planted)).toBe("started");
      const namespaces = namespacesOf(marker);
      expect(namespaces.size).toBeGreaterThan(0);
      // Control: the files are where this test looks (the server's view of the data dir).
      const seen = serverView(sandboxServerUnder(base), base);
      expect(filesWithMarker(seen, marker).length).toBeGreaterThan(0);
      expect(await post("/release", { trajectory_id: t, reset_workspace: true })).toEqual({ status: "ok" });
      const procsNow = slotProcesses(marker, namespaces);
      const filesNow = filesWithMarker(seen, marker);
      expect({ round, procs: procsNow, files: filesNow }).toEqual({ round, procs: [], files: [] });
      await sleep(200);
      expect({ round, procs: slotProcesses(marker, namespaces), files: filesWithMarker(seen, marker) }).toEqual({ round, procs: [], files: [] });
    }
  }, 300_000);
});
