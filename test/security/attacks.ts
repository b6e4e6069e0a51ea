import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { existsSync, readFileSync } from "node:fs";
import { serverView } from "../support/server-view.js";
import type { ExecuteResponse } from "../../src/protocol/sandbox.js";
import {
  ATTACK_LIMITS,
  HOLDER_COMMS,
  SLOT_UID_BASE,
  diskUsage,
  eventually,
  isRoot,
  processesOfUid,
  processesWithMarker,
  rssKb,
  type AttackServer,
} from "./support.js";

/**
 * Resource attacks, shared by `resource-attacks.test.ts` (asserts) and
 * `test/bench/attack-latency.ts` (prints the bystander latency standalone). Each attack runs
 * in `slot` of a server started by `startAttackServer()`; `verify` throws (node:assert)
 * when the attack was not contained.
 */
export interface AttackRun {
  response: ExecuteResponse;
  ms: number;
  /** Figures worth reporting (bytes written, RSS, ...). */
  notes: Record<string, number | string>;
}

export interface Attack {
  name: string;
  run(server: AttackServer, slot: number): Promise<AttackRun>;
  verify(run: AttackRun, server: AttackServer, slot: number): Promise<void>;
}

const MB = 1024 * 1024;

async function timed(fn: () => Promise<ExecuteResponse>): Promise<{ response: ExecuteResponse; ms: number }> {
  const t0 = performance.now();
  const response = await fn();
  return { response, ms: Math.round(performance.now() - t0) };
}

/** Cgroup files the server writes for slot `slot` (v1 layout on the CI box; v2 too). */
export function slotCgroupLimit(serverPid: number, slot: number, kind: "memory" | "pids"): number | null {
  const candidates =
    kind === "memory"
      ? [`/sys/fs/cgroup/memory/slotpool-${serverPid}/slot_${slot}/memory.limit_in_bytes`, `/sys/fs/cgroup/slotpool-${serverPid}/slot_${slot}/memory.max`]
      : [`/sys/fs/cgroup/pids/slotpool-${serverPid}/slot_${slot}/pids.max`, `/sys/fs/cgroup/slotpool-${serverPid}/slot_${slot}/pids.max`];
  for (const f of candidates) {
    if (existsSync(f)) {
      const v = readFileSync(f, "utf8").trim();
      return v === "max" ? null : Number(v);
    }
  }
  return null;
}

/**
 * Processes of one slot of one server: its pids cgroup when the server made one (other
 * servers on this host run their slot_N under the same uid), else every process of the
 * slot's uid.
 */
export function slotProcesses(serverPid: number, slot: number): Array<{ pid: number; comm: string }> {
  for (const f of [`/sys/fs/cgroup/pids/slotpool-${serverPid}/slot_${slot}/cgroup.procs`, `/sys/fs/cgroup/slotpool-${serverPid}/slot_${slot}/cgroup.procs`]) {
    if (!existsSync(f)) continue;
    const out: Array<{ pid: number; comm: string }> = [];
    for (const line of readFileSync(f, "utf8").split("\n").filter(Boolean)) {
      try {
        out.push({ pid: Number(line), comm: readFileSync(`/proc/${line}/comm`, "utf8").trim() });
      } catch {
        /* exited meanwhile */
      }
    }
    return out;
  }
  return isRoot ? processesOfUid(SLOT_UID_BASE + slot) : [];
}

function parentPid(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  return Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
}

/**
 * What may stay alive for a slot between calls: its namespace holders (bwrap + spawner) and
 * the one bash each spawner pre-forks for the next command (`bash -c . /dev/fd/3`, a direct
 * child of the spawner; a command's leftover would have been reparented to the namespace's
 * init, so it cannot pass for it).
 */
export function strayProcesses(serverPid: number, slot: number): Array<{ pid: number; comm: string; cmdline?: string }> {
  const procs = slotProcesses(serverPid, slot);
  const spawners = new Set(procs.filter((p) => p.comm === "spawner").map((p) => p.pid));
  const stray: Array<{ pid: number; comm: string; cmdline?: string }> = [];
  for (const p of procs) {
    if (HOLDER_COMMS.has(p.comm)) continue;
    try {
      const cmdline = readFileSync(`/proc/${p.pid}/cmdline`, "utf8").replace(/\0/g, " ").trim();
      if ((p.comm === "bash" || p.comm === "bash-static") && cmdline === "bash -c . /dev/fd/3" && spawners.has(parentPid(p.pid))) continue;
      stray.push({ ...p, cmdline });
    } catch {
      /* exited meanwhile */
    }
  }
  return stray;
}

/** Only the slot's holders (and their pre-forked bash) may stay alive between calls. */
export async function assertOnlyHolders(server: AttackServer, slot: number): Promise<void> {
  const clean = await eventually(() => strayProcesses(server.proc.pid, slot).length === 0, 30_000);
  assert.ok(clean, `slot_${slot} still has processes after its call: ${JSON.stringify(strayProcesses(server.proc.pid, slot).slice(0, 20))}`);
}

async function assertHealthy(server: AttackServer): Promise<void> {
  const h = await server.health();
  assert.equal(h.status, 200, `/health answered ${h.status} after the attack`);
  assert.equal(h.json?.status, "ok");
  assert.equal(server.proc.child.exitCode, null, "server process exited");
}

export const forkBomb: Attack = {
  name: "fork bomb",
  async run(server, slot) {
    const r = await timed(() => server.bash(slot, "bomb(){ bomb | bomb & }; bomb; sleep 3", { timeout: 6 }));
    return { ...r, notes: {} };
  },
  async verify(run, server, slot) {
    const limit = slotCgroupLimit(server.proc.pid, slot, "pids");
    assert.ok(limit === null || limit <= ATTACK_LIMITS.maxProcesses, `pids cgroup limit ${limit} above the configured ${ATTACK_LIMITS.maxProcesses}`);
    assert.ok(run.ms < 15_000, `fork bomb call took ${run.ms} ms`);
    assert.equal(typeof run.response.metadata.exit_code, "number");
    await assertHealthy(server);
    await assertOnlyHolders(server, slot);
    const after = await server.bash(slot, "echo alive");
    assert.equal(after.output, "alive", "slot unusable after the fork bomb");
  },
};

export const diskFill: Attack = {
  name: "disk-filling loop",
  async run(server, slot) {
    // Many files, each under the per-file cap: RLIMIT_FSIZE alone does not stop this.
    const r = await timed(() => server.bash(slot, "i=0; while :; do head -c 20M /dev/zero > fill_$i || break; i=$((i+1)); done", { timeout: 3 }));
    const written = diskUsage(serverView(server.proc.pid, `${server.dataDir}/slot_${slot}`));
    return { ...r, notes: { written_mb: Math.round(written / MB) } };
  },
  async verify(run, server, slot) {
    const bounded = (await server.health()).json.limits.disk === "workspace_and_tmp";
    if (bounded) {
      // The slot's disk bound (root; not root, in the server's own user namespace) stops it (ENOSPC), long before the timeout.
      assert.match(run.response.output, /No space left on device/);
      assert.notEqual(run.response.metadata.timeout, true, JSON.stringify(run.response).slice(0, 300));
      assert.ok(Number(run.notes["written_mb"]) <= ATTACK_LIMITS.diskMb, `wrote ${run.notes["written_mb"]} MB past --disk-mb ${ATTACK_LIMITS.diskMb}`);
    } else {
      // A server that may not mount does not bound the workspace; the timeout ends it.
      assert.equal(run.response.success, false);
      assert.equal(run.response.metadata.timeout, true, `expected a timeout, got ${JSON.stringify(run.response).slice(0, 300)}`);
      assert.match(run.response.error, /timed out after 3 seconds/);
    }
    await assertHealthy(server);
    await assertOnlyHolders(server, slot);
    const reset = await server.reset(slot);
    assert.equal(reset.status, 200);
    assert.equal(diskUsage(serverView(server.proc.pid, `${server.dataDir}/slot_${slot}`)), 0, "reset left the filler files behind");
  },
};

export const bigFile: Attack = {
  name: "one huge file (2 GB via bash)",
  async run(server, slot) {
    const r = await timed(() => server.bash(slot, "head -c 2G /dev/zero > huge; echo rc=$?; stat -c %s huge"));
    return { ...r, notes: { file_mb: Math.round(diskUsage(serverView(server.proc.pid, `${server.dataDir}/slot_${slot}`)) / MB) } };
  },
  async verify(run, server, slot) {
    assert.match(run.response.output, /File size limit exceeded/);
    assert.match(run.response.output, new RegExp(`^${ATTACK_LIMITS.maxFileMb * MB}$`, "m"), "file grew beyond --max-file-mb");
    await assertHealthy(server);
    await server.reset(slot);
  },
};

export const memoryHog: Attack = {
  name: "memory hog (grows to 2 GB)",
  async run(server, slot) {
    // A string doubling up to 2 GB (awk: in every Debian): the slot's memory limit must stop it first.
    const r = await timed(() =>
      server.bash(slot, `awk 'BEGIN { s = "x"; for (i = 0; i < 31; i++) s = s s; print "survived", length(s) }'; echo rc=$?`, { timeout: 15 }),
    );
    return { ...r, notes: { server_rss_mb: Math.round(rssKb(server.proc.pid) / 1024) } };
  },
  async verify(run, server, slot) {
    assert.doesNotMatch(run.response.output, /^survived \d+/m, "2 GB allocation succeeded despite --memory-mb");
    // 137: killed by the slot's memory cgroup; 1 or 2 (mawk's "out of memory"): refused by RLIMIT_AS where there is no cgroup.
    assert.match(run.response.output, /rc=(137|1|2)\b/, `hog was not stopped: ${run.response.output.slice(0, 300)}`);
    await assertHealthy(server);
    await assertOnlyHolders(server, slot);
  },
};

export const endlessOutput: Attack = {
  name: "endless output (yes)",
  async run(server, slot) {
    const before = rssKb(server.proc.pid);
    const r = await timed(() => server.bash(slot, "yes slotpool-output-flood", { timeout: 3 }));
    const after = rssKb(server.proc.pid);
    return { ...r, notes: { server_rss_mb_before: Math.round(before / 1024), server_rss_mb_after: Math.round(after / 1024), output_chars: r.response.output.length } };
  },
  async verify(run, server, slot) {
    const r = run.response;
    assert.equal(r.metadata.timeout, true);
    assert.equal(r.metadata.truncated, true);
    assert.ok(r.output.length <= ATTACK_LIMITS.outputCap + 200, `returned ${r.output.length} chars, cap ${ATTACK_LIMITS.outputCap}`);
    assert.ok(Number(run.notes["server_rss_mb_after"]) < 250, `server RSS ${run.notes["server_rss_mb_after"]} MB after the flood`);
    await assertHealthy(server);
    await assertOnlyHolders(server, slot);
    await server.reset(slot);
  },
};

/** Ways a command tries to leave something running after its call. */
export const DAEMON_VARIANTS: Record<string, (m: string) => string> = {
  "double fork": (m) => `( ( exec -a ${m} sleep 300 ) & ) ; echo started`,
  setsid: (m) => `setsid -f bash -c 'exec -a ${m} sleep 300' ; echo started`,
  nohup: (m) => `nohup bash -c 'exec -a ${m} sleep 300' >/dev/null 2>&1 & echo started`,
  disown: (m) => `bash -c 'exec -a ${m} sleep 300' & disown; echo started`,
  "ignores SIGTERM/SIGHUP": (m) => `(trap '' TERM HUP INT; exec -a ${m} sleep 300) & disown; echo started`,
};

export function daemonAttack(variant: string): Attack {
  const build = DAEMON_VARIANTS[variant]!;
  return {
    name: `daemonize: ${variant}`,
    async run(server, slot) {
      const marker = `slotpool-daemon-${randomBytes(4).toString("hex")}`;
      const r = await timed(() => server.bash(slot, build(marker)));
      // Sampled right after the call returned.
      const survivors = processesWithMarker(marker).length;
      return { ...r, notes: { marker, survivors_at_return: survivors } };
    },
    async verify(run, server, slot) {
      assert.equal(run.response.output, "started", JSON.stringify(run.response));
      const marker = String(run.notes["marker"]);
      const gone = await eventually(() => processesWithMarker(marker).length === 0, 30_000);
      assert.ok(gone, `${run.notes["marker"]} outlived its call: ${JSON.stringify(processesWithMarker(marker))}`);
      await assertHealthy(server);
      await assertOnlyHolders(server, slot);
    },
  };
}

export const hugeArgument: Attack = {
  name: "10 MB command",
  async run(server, slot) {
    const r = await timed(() => server.bash(slot, `echo ${"a".repeat(10 * MB)} | wc -c`));
    return { ...r, notes: { server_rss_mb: Math.round(rssKb(server.proc.pid) / 1024) } };
  },
  async verify(run, server) {
    const r = run.response;
    // Either it runs (the spawner passes the script without execve limits) or it fails clearly.
    if (r.success) assert.equal(r.output.trim(), String(10 * MB + 1));
    else assert.ok(r.error.length > 0 && r.error.length < 2_000, `unclear error: ${r.error.slice(0, 300)}`);
    assert.ok(run.ms < 20_000, `10 MB command took ${run.ms} ms`);
    await assertHealthy(server);
  },
};

export const hugeWriteFile: Attack = {
  name: "write_file of 11 MB (cap 10 MB)",
  async run(server, slot) {
    const r = await timed(() => server.tool(slot, "write_file", { path: "big.txt", content: "x".repeat(11 * MB) }));
    return { ...r, notes: { written_bytes: diskUsage(serverView(server.proc.pid, `${server.dataDir}/slot_${slot}`)) } };
  },
  async verify(run, server) {
    assert.equal(run.response.success, false, "write_file above the cap succeeded");
    assert.match(run.response.error, /at most \d+ bytes|too large|exceeds|limit/i, run.response.error);
    assert.ok(Number(run.notes["written_bytes"]) <= 10 * MB, `wrote ${run.notes["written_bytes"]} bytes`);
    await assertHealthy(server);
  },
};

export const killAll: Attack = {
  name: "kill -9 -1",
  async run(server, slot) {
    const r = await timed(() => server.bash(slot, "kill -9 -1; echo survived"));
    return { ...r, notes: {} };
  },
  async verify(run, server, slot) {
    assert.ok(run.ms < 5_000);
    await assertHealthy(server);
    const again = await server.bash(slot, "echo usable");
    assert.equal(again.output, "usable", "the slot did not recover from kill -9 -1");
  },
};

export const RESOURCE_ATTACKS: Attack[] = [
  forkBomb,
  diskFill,
  bigFile,
  memoryHog,
  endlessOutput,
  ...Object.keys(DAEMON_VARIANTS).map(daemonAttack),
  hugeArgument,
  hugeWriteFile,
  killAll,
];
