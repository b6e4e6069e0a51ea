/**
 * The persistent terminal (`bash_stateful`, `tmux`) keeps what a command starts alive
 * between calls by design — so these attacks aim at what must still hold: the slot's limits
 * apply to the session, other slots (and other servers' slots of the same uid) are not
 * affected, nothing of it reaches the token, and reset ends all of it (checked from the host).
 */
import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { assertOnlyHolders, slotProcesses } from "./attacks.js";
import { ATTACK_LIMITS, bystanderLatency, eventually, processesWithMarker, startAttackServer, within, type AttackServer } from "./support.js";

let server: AttackServer;
const rows: Array<Record<string, unknown>> = [];

function stateful(s: AttackServer, slot: number, command: string, timeout?: number) {
  return s.execute({ slot_id: `slot_${slot}`, tool: "bash_stateful", args: { command, require_sandbox: true, allow_network: false, ...(timeout ? { timeout } : {}) } });
}

/** Every test leaves slot_0 reset, even when it failed half-way (a live bomb would spoil the next). */
async function withReset<T>(fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } finally {
    await server.reset(0).catch(() => undefined);
  }
}

beforeAll(async () => {
  server = await startAttackServer({ slots: 3 });
  expect((await server.health()).json.bwrap_available).toBe(true);
  await server.bash(2, "true");
}, 60_000);
afterAll(async () => {
  console.log("\nbystander latency (ms) during stateful-session attacks in slot_0:");
  console.table(rows);
  await server?.stop();
});

describe("stateful session attacks", () => {
  it("daemons started in the session live on between calls (by design), are invisible to other slots, and die at reset", () =>
    withReset(async () => {
      const m = `slotpool-stateful-${randomBytes(4).toString("hex")}`;
      const r = await stateful(server, 0, `setsid -f bash -c 'exec -a ${m}-setsid sleep 300'; nohup bash -c 'exec -a ${m}-nohup sleep 300' >/dev/null 2>&1 & ( ( exec -a ${m}-fork sleep 300 & ) & ); echo started`);
      expect(r.output).toBe("started");
      expect(await eventually(() => processesWithMarker(m).length >= 3, 30_000), JSON.stringify(processesWithMarker(m))).toBe(true);
      const tmux = await server.execute({ slot_id: "slot_0", tool: "tmux", args: { action: "send_keys", keys: `exec -a ${m}-tmux sleep 300 &`, allow_network: false } });
      expect(tmux.success, JSON.stringify(tmux)).toBe(true);
      expect(await eventually(() => processesWithMarker(m).length >= 4, 30_000), JSON.stringify(processesWithMarker(m))).toBe(true);
      const seen = await server.bash(1, "for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f; echo; done 2>/dev/null; echo listed");
      expect(seen.output).toContain("listed");
      expect(seen.output).not.toContain(m);
      const reset = await within(15_000, "reset", server.reset(0));
      expect(reset.json.success).toBe(true);
      expect(await eventually(() => processesWithMarker(m).length === 0, 30_000), JSON.stringify(processesWithMarker(m))).toBe(true);
      await assertOnlyHolders(server, 0);
    }), 60_000);

  it("a fork bomb left running in the session is capped by the slot's pids limit, other slots keep their latency, and reset ends it", () =>
    withReset(async () => {
      const attack = (async () => {
        const r = await stateful(server, 0, "bomb(){ bomb | bomb & }; bomb; sleep 1; echo launched", 10);
        // The bomb keeps running in the session after its call: watch it for 3 s more.
        let peak = 0;
        for (let i = 0; i < 6; i++) {
          peak = Math.max(peak, slotProcesses(server.proc.pid, 0).length);
          await new Promise((res) => setTimeout(res, 500));
        }
        return { r, peak };
      })();
      const { result, stats } = await within(45_000, "stateful fork bomb", bystanderLatency(server, 2, attack));
      rows.push({ attack: "fork bomb living on in the session", ...stats, slot_processes_peak: result.peak });
      const health = await server.health();
      expect(health.status).toBe(200);
      if (health.json.limits.per_slot_uids) {
        // Root: the slot's own pids cgroup / uid bounds the bomb; other slots do not feel it.
        expect(result.peak).toBeGreaterThan(20);
        expect(result.peak).toBeLessThanOrEqual(ATTACK_LIMITS.maxProcesses);
        expect(stats.failures).toBe(0);
        expect(stats.p99).toBeLessThan(2_500);
      } else {
        // Non-root: all slots share the server's uid and its RLIMIT_NPROC, so other slots'
        // forks may fail while the bomb lives: /health says so, and reset ends it (below).
        expect(health.json.limits.pids).toBe("rlimit_nproc_shared_uid");
        expect(health.json.limits.gaps.join(" ")).toContain("a fork bomb in one slot can make forks fail in the others");
      }
      const reset = await within(20_000, "reset after the bomb", server.reset(0));
      expect(reset.json.success).toBe(true);
      await assertOnlyHolders(server, 0);
      expect((await stateful(server, 0, "echo fresh")).output).toBe("fresh");
    }), 60_000);

  it("a fork bomb in slot_0 of one server does not block slot_0 (the same host uid) of another server", async () => {
    const other = await startAttackServer({ slots: 1 });
    try {
      await withReset(async () => {
        await stateful(server, 0, "bomb(){ bomb | bomb & }; bomb; sleep 1; echo launched", 10);
        if ((await other.health()).json.limits.per_slot_uids) {
          // Root: each server's slots have their own uid block, so RLIMIT_NPROC is not shared.
          expect(slotProcesses(server.proc.pid, 0).length).toBeGreaterThan(20);
          const r = await within(10_000, "other server's slot_0", other.bash(0, "echo ok"));
          expect(r.output).toBe("ok");
        } else {
          // Non-root: both servers run every slot as the same uid; once the bomb is reset
          // away, the other server's slot works again.
          expect((await other.health()).json.limits.pids).toBe("rlimit_nproc_shared_uid");
          await within(20_000, "reset after the bomb", server.reset(0));
          const r = await within(10_000, "other server's slot_0", other.bash(0, "echo ok"));
          expect(r.output).toBe("ok");
        }
      });
    } finally {
      await other.stop();
    }
  }, 60_000);

  it("a memory hog in the session is killed by the slot's memory limit", () =>
    withReset(async () => {
      const r = await stateful(server, 0, `awk 'BEGIN { s = "x"; for (i = 0; i < 31; i++) s = s s; print "survived", length(s) }'; echo rc=$?`, 20);
      expect(r.output).not.toMatch(/^survived/m);
      expect(r.output).toMatch(/rc=(137|1|2)\b/); // 2: mawk's "out of memory" under RLIMIT_AS (no cgroup)
      expect((await server.health()).status).toBe(200);
    }), 60_000);

  it("the session's environment holds no token and no host variable", () =>
    withReset(async () => {
      const r = await stateful(server, 0, "env; cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n'; echo end");
      expect(r.output).toContain("end");
      expect(r.output).not.toContain(server.token);
      expect(r.output).not.toContain("SANDBOX_TOKEN");
      expect(r.output).not.toMatch(/SLOTPOOL_LOG_LEVEL|NODE_|npm_/);
    }));

  it("endless output in the session: stopped by its timeout or by the file size limit on its output file, returned capped", () =>
    withReset(async () => {
      const r = await within(30_000, "yes in the session", stateful(server, 0, "yes slotpool-flood", 3));
      expect(r.success).toBe(false);
      // The session's output goes through a file: RLIMIT_FSIZE (SIGXFSZ, exit 153) may end it first.
      expect(r.metadata.timeout === true || r.metadata.exit_code === 153, JSON.stringify(r.metadata)).toBe(true);
      expect(r.metadata.truncated).toBe(true);
      expect(r.output.length).toBeLessThanOrEqual(ATTACK_LIMITS.outputCap + 200);
      expect((await server.health()).status).toBe(200);
    }), 60_000);
});
