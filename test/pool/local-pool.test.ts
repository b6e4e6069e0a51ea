import { existsSync } from "node:fs";
import { chmod, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { SlotLostError } from "../../src/pool/errors.js";
import { LocalProvisioner } from "../../src/pool/local-provisioner.js";
import { SlotPool, type SlotPoolOptions } from "../../src/pool/slot-pool.js";
import type { LeasedSlot } from "../../src/pool/types.js";

// The whole path on real processes: pool → LocalProvisioner → sandbox-server → bubblewrap.
let baseDir: string;
const pools: SlotPool[] = [];

beforeAll(async () => {
  baseDir = await mkdtemp(join(tmpdir(), "slotpool-localpool-"));
  // mkdtemp makes it 0700: a root server's slot uids must traverse it (else it refuses to start).
  await chmod(baseDir, 0o755);
});
afterEach(async () => {
  for (const p of pools.splice(0)) await p.stop();
});
afterAll(async () => {
  await rm(baseDir, { recursive: true, force: true });
});

function localPool(config: Partial<SlotPoolOptions> & { extraArgs?: string[] } = {}): { pool: SlotPool; provisioner: LocalProvisioner } {
  const { extraArgs, ...rest } = config;
  const slotsPerContainer = rest.slotsPerContainer ?? 2;
  const provisioner = new LocalProvisioner({
    slotsPerContainer,
    baseDir: join(baseDir, `p${pools.length}-${Date.now()}`),
    ...(extraArgs ? { extraArgs } : {}),
  });
  const pool = new SlotPool({ slotsPerContainer, minContainers: 1, maxContainers: 3, tickMs: 50, ...rest, provisioner });
  pools.push(pool);
  return { pool, provisioner };
}

async function until(cond: () => boolean, timeoutMs = 15_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error("condition not met in time");
    await new Promise((r) => setTimeout(r, 10));
  }
}

const bash = (slot: LeasedSlot, command: string) => slot.execute({ tool: "bash", args: { command } });

describe("SlotPool on the LocalProvisioner (real sandbox servers)", () => {
  it("starts, runs commands, resets on release, and cleans up its processes", async () => {
    // One slot, so b surely gets a's (just-reset) slot.
    const { pool, provisioner } = localPool({ slotsPerContainer: 1, minContainers: 1, maxContainers: 1 });
    await pool.start();
    const [proc] = provisioner.processes();
    expect(proc!.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    const a = await pool.acquire({ trajectoryId: "a" });
    expect((await bash(a, "echo data > f.txt && cat f.txt")).output.trim()).toBe("data");
    expect((await a.readArtifact({ path: "f.txt" })).content.trim()).toBe("data");
    await pool.release(a);
    const b = await pool.acquire({ trajectoryId: "b" });
    expect(b.key).toBe(a.key);
    expect((await bash(b, "ls -A")).output.trim()).toBe("");
    await pool.stop();
    expect(() => process.kill(proc!.pid, 0)).toThrow();
    expect(existsSync(proc!.dataDir)).toBe(false);
  });

  it("scales up under demand with one scale call and serves every waiter", async () => {
    const { pool } = localPool({ slotsPerContainer: 2, minContainers: 1, maxContainers: 3 });
    await pool.start();
    const slots = await Promise.all(Array.from({ length: 6 }, (_, i) => pool.acquire({ trajectoryId: `t${i}` })));
    expect(pool.scaleLog().map((e) => e.to)).toEqual([3]);
    expect(new Set(slots.map((s) => s.container.index))).toEqual(new Set([0, 1, 2]));
    const outs = await Promise.all(slots.map((s) => bash(s, `echo ${s.trajectoryId}`)));
    expect(outs.map((o) => o.output.trim())).toEqual(slots.map((s) => s.trajectoryId));
  });

  it("scale-down under load drains the highest containers: no trajectory loses its workspace", async () => {
    const { pool, provisioner } = localPool({ slotsPerContainer: 2, minContainers: 1, maxContainers: 3, idleTimeoutMs: 300 });
    await pool.start();
    const slots = await Promise.all(Array.from({ length: 6 }, (_, i) => pool.acquire({ trajectoryId: `t${i}` })));
    for (const s of slots) await s.execute({ tool: "write_file", args: { path: "mine.txt", content: s.trajectoryId } });
    const removed: number[] = [];
    pool.on("container-removed", (e) => removed.push(e.container.index));
    // Demand falls to 4 slots = 2 containers: container 2 is drained, its trajectories keep running.
    for (const s of slots.filter((s) => s.container.index === 0)) await pool.release(s);
    const onHigh = slots.filter((s) => s.container.index > 0);
    await until(() => pool.stats().containers.draining === 1);
    expect(pool.containerList().find((c) => c.state === "draining")!.index).toBe(2);
    // Release one trajectory at a time while the others keep working in their workspaces.
    for (const s of onHigh.sort((x, y) => y.container.index - x.container.index)) {
      for (const other of onHigh.filter((o) => !o.lost && o !== s)) {
        const res = await other.execute({ tool: "read_file", args: { path: "mine.txt" } }).catch((e: unknown) => e);
        if (res instanceof Error && res.name === "SlotReleasedError") continue;
        expect(res).toMatchObject({ success: true });
        expect((res as { output: string }).output).toContain(other.trajectoryId);
      }
      expect(s.lost).toBe(false);
      await pool.release(s);
    }
    await until(() => removed.length === 2);
    expect(removed.sort()).toEqual([1, 2]);
    expect(provisioner.processes().map((p) => p.index)).toEqual([0]);
    expect(pool.stats().containers.lost).toBe(0);
    expect(pool.scaleLog().at(-1)).toMatchObject({ ok: true, to: 1 });
  });

  it("a killed container: SlotLostError naming it, noticed within 2 s; a replacement joins", async () => {
    const { pool, provisioner } = localPool({ slotsPerContainer: 2, minContainers: 1, maxContainers: 1 });
    await pool.start();
    const a = await pool.acquire({ trajectoryId: "a" });
    await bash(a, "echo keep > f");
    const [proc] = provisioner.processes();
    const lost = new Promise<number>((resolve) => pool.once("slot-lost", () => resolve(Date.now())));
    const t0 = Date.now();
    process.kill(proc!.pid, "SIGKILL");
    const noticedAt = await lost;
    expect(noticedAt - t0).toBeLessThan(2_000);
    const err = await bash(a, "cat f").catch((e: unknown) => e);
    expect(err).toBeInstanceOf(SlotLostError);
    expect((err as SlotLostError).containerId).toBe(proc!.id);
    expect((err as Error).message).toMatch(/SIGKILL/);
    await pool.release(a);
    const b = await pool.acquire({ trajectoryId: "b", timeoutMs: 15_000 });
    expect(b.container.id).not.toBe(proc!.id);
    expect(b.container.index).toBe(0);
    expect((await bash(b, "ls -A")).output.trim()).toBe("");
  });

  it("a data dir the slot uids cannot reach: refused at start when root (naming the dir and the fix); fine otherwise", async () => {
    const hidden = await mkdtemp(join(tmpdir(), "slotpool-hidden-")); // 0700, like /root
    const provisioner = new LocalProvisioner({ slotsPerContainer: 1, baseDir: join(hidden, "data") });
    const pool = new SlotPool({ slotsPerContainer: 1, minContainers: 1, maxContainers: 1, tickMs: 50, provisioner });
    pools.push(pool);
    try {
      if (process.getuid?.() === 0) {
        const err = await pool.start().then(() => undefined, (e: unknown) => e as Error);
        expect(err?.message).toContain(`the data dir ${join(hidden, "data")} is out of reach of the slot uids: ${hidden} is mode 0700`);
        expect(err?.message).toContain(`chmod o+x ${hidden}`);
      } else {
        await pool.start();
        const slot = await pool.acquire({ trajectoryId: "t" });
        const r = await bash(slot, "echo ok");
        expect(r.output.trim()).toBe("ok");
        expect(r.metadata.sandboxed).toBe(true);
        await pool.release(slot);
      }
    } finally {
      // The pool's servers stop first: one still running writes into its data dir while it goes.
      await pool.stop();
      await rm(hidden, { recursive: true, force: true });
    }
  });

  it("fails start() fast on a crash loop, with the servers' own output", async () => {
    const { pool } = localPool({ minContainers: 1, extraArgs: ["--no-such-flag"] });
    const t0 = Date.now();
    const err = await pool.start().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(Error);
    expect((err as Error).message).toMatch(/crash-looping/);
    expect((err as Error).message).toMatch(/no-such-flag/);
    // bound: "fast": from the crash loop it sees, not the pool's 120 s start timeout; 15 s is far from both on a loaded box.
    expect(Date.now() - t0).toBeLessThan(15_000);
  });

  it("reclaims an abandoned slot after its lease and resets it", async () => {
    const { pool } = localPool({ slotsPerContainer: 1, minContainers: 1, maxContainers: 1, leaseTimeoutMs: 300 });
    await pool.start();
    const warned: string[] = [];
    pool.on("slot-reclaimed", (e) => warned.push(e.trajectoryId));
    const a = await pool.acquire({ trajectoryId: "forgotten" });
    await bash(a, "echo x > left-behind");
    const b = await pool.acquire({ trajectoryId: "next", timeoutMs: 10_000 });
    expect(warned).toEqual(["forgotten"]);
    expect(b.key).toBe(a.key);
    expect((await bash(b, "ls -A")).output.trim()).toBe("");
    await expect(bash(a, "true")).rejects.toThrow(/forgotten neither used nor released/);
  });
});
