// runs as each user: a template view is an id-mapped overlay as root and the template's own tree as the lower layer otherwise
import { chmod, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { ExecutorServer } from "../../src/executor/executor-server.js";
import { ToolExecutor } from "../../src/executor/tool-executor.js";
import { PoolTemplateError, SlotLostError } from "../../src/pool/errors.js";
import { LocalProvisioner } from "../../src/pool/local-provisioner.js";
import { SlotPool, type SlotPoolOptions } from "../../src/pool/slot-pool.js";
import type { TemplateSpec } from "../../src/pool/template-affinity.js";
import type { LeasedSlot } from "../../src/pool/types.js";

/**
 * Workspace templates through the pool (issue 13), on real sandbox servers started by the
 * LocalProvisioner: one build per container, affinity, a container lost mid-build, and the
 * executor's API.
 */
let baseDir: string;
const pools: SlotPool[] = [];

beforeAll(async () => {
  baseDir = await mkdtemp(join(tmpdir(), "slotpool-tplpool-"));
  // Slot uids must traverse it to reach their workspaces (else bubblewrap is refused).
  await chmod(baseDir, 0o711);
});
afterEach(async () => {
  for (const p of pools.splice(0)) await p.stop({ purge: true });
});
afterAll(async () => {
  await rm(baseDir, { recursive: true, force: true });
});

function localPool(config: Partial<SlotPoolOptions> & { extraArgs?: string[] }): { pool: SlotPool; provisioner: LocalProvisioner } {
  const { extraArgs, ...rest } = config;
  const slotsPerContainer = rest.slotsPerContainer ?? 2;
  const provisioner = new LocalProvisioner({ slotsPerContainer, baseDir: join(baseDir, `p${pools.length}-${Date.now()}`), ...(extraArgs ? { extraArgs } : {}) });
  const pool = new SlotPool({ slotsPerContainer, minContainers: 1, maxContainers: 1, tickMs: 50, ...rest, provisioner });
  pools.push(pool);
  return { pool, provisioner };
}

const bash = async (slot: LeasedSlot, command: string) => (await slot.execute({ tool: "bash", args: { command } })).output.trim();

/** A template whose build leaves a unique stamp: equal stamps = one build. */
const REPO: TemplateSpec = {
  name: "repo",
  files: { "lib/app.sh": "answer() { echo 41; }\n" },
  setup: ["sleep 0.3; date +%s%N > build-stamp && git init -q . && git add -A && git -c user.email=t@example.invalid -c user.name=t commit -qm init"],
};

describe("workspace templates through the pool", () => {
  it("a group of 16 trajectories on one item builds the template once", async () => {
    const { pool } = localPool({ slotsPerContainer: 16 });
    await pool.start();
    const executor = new ToolExecutor({ pool });
    await executor.start();
    try {
      const ids = Array.from({ length: 16 }, (_, i) => `traj-${i}`);
      await Promise.all(ids.map((id) => executor.prepareWorkspace(id, REPO)));
      expect(pool.templates.builds).toBe(1);
      const outs = await Promise.all(ids.map((id) => executor.execute(id, { name: "bash", arguments: { command: "cat build-stamp; git log --oneline | wc -l; . lib/app.sh; answer" } })));
      const stamps = new Set(outs.map((o) => o.output.split("\n")[0]));
      expect(stamps.size).toBe(1);
      expect(outs.every((o) => o.output.endsWith("\n1\n41") || o.output.endsWith("\n1\n41\n"))).toBe(true);
      // Each trajectory's changes are its own.
      await executor.execute("traj-0", { name: "bash", arguments: { command: "echo mine > lib/app.sh" } });
      expect((await executor.execute("traj-1", { name: "bash", arguments: { command: "cat lib/app.sh" } })).output.trim()).toBe("answer() { echo 41; }");
      // A second group on the same container: no new build.
      await Promise.all(ids.map((id) => executor.release(id)));
      await Promise.all(ids.map((id) => executor.prepareWorkspace(`${id}-b`, REPO)));
      expect(pool.templates.builds).toBe(1);
      await Promise.all(ids.map((id) => executor.release(`${id}-b`)));
    } finally {
      await executor.close();
    }
  }, 120_000);

  it("prefers a container that holds the template, and builds it where it is missing", async () => {
    const { pool } = localPool({ slotsPerContainer: 2, minContainers: 2, maxContainers: 2 });
    await pool.start();
    // Fill container 0 so the first templated trajectory lands on container 1.
    const x1 = await pool.acquire({ trajectoryId: "x1" });
    const x2 = await pool.acquire({ trajectoryId: "x2" });
    const t1 = await pool.acquire({ trajectoryId: "t1", template: "repo" });
    expect(t1.container.id).not.toBe(x1.container.id);
    await pool.useTemplate(t1, REPO);
    expect(pool.templates.builds).toBe(1);
    expect(pool.templates.holders("repo")).toEqual([t1.container.id]);
    await Promise.all([pool.release(x1), pool.release(x2), pool.release(t1)]);
    // Without affinity packing would pick container 0 (lowest index); the template is on 1.
    const t2 = await pool.acquire({ trajectoryId: "t2", template: "repo" });
    expect(t2.container.id).toBe(t1.container.id);
    await pool.useTemplate(t2, REPO);
    expect(pool.templates.builds).toBe(1);
    // A plain acquire still packs onto container 0.
    const plain = await pool.acquire({ trajectoryId: "p" });
    expect(plain.container.id).toBe(x1.container.id);
    // A trajectory placed where the template is missing gets it built there.
    await pool.useTemplate(plain, REPO);
    expect(pool.templates.builds).toBe(2);
    expect(await bash(plain, "git log --oneline | wc -l")).toBe("1");
    await Promise.all([pool.release(t2), pool.release(plain)]);
  }, 120_000);

  it("a container lost while building: the trajectory gets SlotLostError, nothing is recorded, the next container builds", async () => {
    const { pool, provisioner } = localPool({ slotsPerContainer: 1, minContainers: 1, maxContainers: 1 });
    await pool.start();
    const slot = await pool.acquire({ trajectoryId: "doomed" });
    const slow: TemplateSpec = { name: "slow", setup: ["echo started; sleep 30"] };
    const building = pool.useTemplate(slot, slow);
    // wait: the build under way on the server when its container dies (killed before, the answer is the same loss)
    await new Promise((r) => setTimeout(r, 1_500));
    const [proc] = provisioner.processes();
    process.kill(proc!.pid, "SIGKILL");
    await expect(building).rejects.toBeInstanceOf(SlotLostError);
    expect(pool.templates.builds).toBe(0);
    expect(pool.templates.holders("slow")).toEqual([]);
    await pool.release(slot);
    // The pool replaces the container; the template is built there.
    const next = await pool.acquire({ trajectoryId: "next", template: "repo", timeoutMs: 60_000 });
    expect(next.container.id).not.toBe(slot.container.id);
    await pool.useTemplate(next, REPO);
    expect(pool.templates.builds).toBe(1);
    expect(await bash(next, "test -s build-stamp && echo ok")).toBe("ok");
    await pool.release(next);
  }, 120_000);

  it("a template the server evicted (budget) is built again when a trajectory needs it", async () => {
    const { pool } = localPool({ slotsPerContainer: 1, extraArgs: ["--template-budget-mb", "2"] });
    await pool.start();
    const blob = (name: string): TemplateSpec => ({ name, setup: [`head -c 1500000 /dev/urandom > ${name}.bin`] });
    const first = await pool.acquire({ trajectoryId: "e1" });
    await pool.useTemplate(first, blob("a"));
    await pool.release(first); // a plain reset: a is unused now
    const slot = await pool.acquire({ trajectoryId: "e2" });
    await pool.useTemplate(slot, blob("b")); // 2 x 1.5 MB > 2 MB: the server evicts a
    expect(pool.templates.builds).toBe(2);
    expect(pool.templates.holders("a")).toEqual([slot.container.id]); // the pool does not know yet
    await pool.useTemplate(slot, blob("a"));
    expect(pool.templates.builds).toBe(3);
    expect(await bash(slot, "ls")).toBe("a.bin");
    await pool.release(slot);
  }, 60_000);

  it("a failing build is a clear PoolTemplateError and the slot stays usable", async () => {
    const { pool } = localPool({ slotsPerContainer: 1 });
    await pool.start();
    const slot = await pool.acquire({ trajectoryId: "f" });
    const err = await pool.useTemplate(slot, { name: "bad", setup: ["echo compiling; exit 7"] }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(PoolTemplateError);
    expect((err as Error).message).toMatch(/template 'bad' could not be built on container .*: template 'bad' build failed: setup\[0\] `echo compiling; exit 7` exited 7\n\$ echo compiling; exit 7\ncompiling/s);
    expect(pool.templates.holders("bad")).toEqual([]);
    expect(await bash(slot, "echo fine")).toBe("fine");
    await pool.release(slot);
  }, 60_000);

  it("the executor service accepts a template: POST /prepare_workspace", async () => {
    const { pool } = localPool({ slotsPerContainer: 2 });
    await pool.start();
    const executor = new ToolExecutor({ pool });
    await executor.start();
    const server = new ExecutorServer({ executor, pool });
    const url = await server.listen(0, "127.0.0.1");
    try {
      const post = async (path: string, body: unknown) => {
        const r = await fetch(url + path, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
        return { status: r.status, json: (await r.json()) as any };
      };
      const ok = await post("/prepare_workspace", { trajectory_id: "h1", template: { name: REPO.name, setup: REPO.setup, files: REPO.files, timeout_s: 120 } });
      expect(ok).toEqual({ status: 200, json: { success: true, error: "" } });
      const run = await post("/execute", { trajectory_id: "h1", tool: { name: "terminal", arguments: { command: ". lib/app.sh; answer" } } });
      expect(run.json.output.trim()).toBe("41");
      const bad = await post("/prepare_workspace", { trajectory_id: "h2", template: { name: "bad", setup: ["exit 3"] } });
      expect(bad.json.success).toBe(false);
      expect(bad.json.error).toMatch(/exited 3/);
      const invalid = await post("/prepare_workspace", { trajectory_id: "h3", template: { setup: [] } });
      expect(invalid.status).toBe(400);
      await post("/release", { trajectory_id: "h1" });
      await post("/release", { trajectory_id: "h2" });
    } finally {
      await server.close();
      await executor.close();
    }
  }, 60_000);
});
