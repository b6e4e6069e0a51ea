import { FileNotFoundError, Sandbox } from "e2b";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { startE2b, type E2bHarness } from "./helpers.js";

/**
 * E2B's pause / resume against slotpool, with the real `e2b` SDK: a paused sandbox's
 * processes are frozen where they are (the slot's freezer cgroup as root, SIGSTOP/SIGCONT
 * of its process trees without cgroups: both are run here), its files and /tmp stay,
 * `connect` resumes it, it is listed as paused, its timeout does not run, and a kill
 * releases its slot to the next sandbox.
 */

const isRoot = process.getuid?.() === 0;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function until(cond: () => Promise<boolean>, timeoutMs = 20_000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!(await cond())) {
    if (Date.now() > end) throw new Error("condition not met in time");
    await sleep(50);
  }
}

/** The counter's log: "<n> <unix ns>" per tick. */
function ticks(text: string): Array<{ n: number; ms: number }> {
  return text
    .trim()
    .split("\n")
    .filter(Boolean)
    .map((l) => {
      const [n, ns] = l.split(" ");
      return { n: Number(n), ms: Number(BigInt(ns!) / 1_000_000n) };
    });
}

/** What the sandbox server says a freeze of this sandbox's slot uses (idempotent on a frozen slot). */
async function mechanism(h: E2bHarness, id: string): Promise<{ mechanism: string; processes: number }> {
  const slot = h.server.registry.get(id)!.slot;
  const res = await fetch(slot.container.url + "/processes/freeze", {
    method: "POST",
    headers: { "content-type": "application/json", ...(slot.container.token ? { authorization: `Bearer ${slot.container.token}` } : {}) },
    body: JSON.stringify({ slot_id: slot.slotId }),
  });
  expect(res.status).toBe(200);
  return (await res.json()) as { mechanism: string; processes: number };
}

/** The counter's log so far; none yet until its first tick has created the file (a loaded box may take a while). */
async function readTicks(sbx: Sandbox): Promise<Array<{ n: number; ms: number }>> {
  try {
    return ticks(await sbx.files.read("/home/user/ticks"));
  } catch (err) {
    if (err instanceof FileNotFoundError) return [];
    throw err;
  }
}

const COUNTER = `i=0; while :; do i=$((i+1)); echo "$i $(date +%s%N)" >> /home/user/ticks; sleep 0.05; done`;

describe.each([
  { name: isRoot ? "freezer cgroup" : "signals (non-root)", args: [] as string[], expected: isRoot ? "cgroup-freezer" : "signals" },
  { name: "signals (--no-cgroups)", args: ["--no-cgroups"], expected: "signals" },
])("pause and resume: $name", ({ args, expected }) => {
  let h: E2bHarness;
  beforeAll(async () => {
    h = await startE2b({ slots: 2, sandboxServerArgs: args });
  }, 120_000);
  afterAll(async () => {
    await h?.stop();
  });
  // A case that fails midway must not leave its sandboxes holding the two slots: the next case would wait for one until it timed out.
  afterEach(async () => {
    if (!h) return;
    const left = await Sandbox.list(h.opts).nextItems();
    await Promise.all(left.map((s) => Sandbox.kill(s.sandboxId, h.opts)));
  });

  it("pause freezes a running background process and keeps /tmp; the sandbox is listed paused; connect resumes it where it was", { timeout: 60_000 }, async () => {
    const sbx = await Sandbox.create({ ...h.opts, timeoutMs: 120_000, metadata: { case: "freeze" } });
    await sbx.files.write("/tmp/keep.txt", "kept in /tmp");
    const bg = await sbx.commands.run(COUNTER, { background: true });
    await until(async () => (await readTicks(sbx)).length >= 3);

    expect(await sbx.pause()).toBe(true);
    const pausedAt = Date.now();
    expect(await mechanism(h, sbx.sandboxId)).toMatchObject({ mechanism: expected });
    expect(await sbx.isRunning()).toBe(false);
    // As E2B: a paused sandbox's API answers 502, which the SDK reports as a sandbox not running.
    await expect(sbx.commands.run("true")).rejects.toThrow(/not running/);
    expect((await Sandbox.getInfo(sbx.sandboxId, h.opts)).state).toBe("paused");
    const paused = await Sandbox.list({ ...h.opts, query: { state: ["paused"], metadata: { case: "freeze" } } }).nextItems();
    expect(paused.map((s) => [s.sandboxId, s.state])).toEqual([[sbx.sandboxId, "paused"]]);
    const running = await Sandbox.list({ ...h.opts, query: { state: ["running"], metadata: { case: "freeze" } } }).nextItems();
    expect(running).toEqual([]);

    // wait: paused long enough for the counter to have ticked several times had the pause not held (it ticks every few hundred ms)
    await sleep(1500);
    const resumeAt = Date.now();
    const resumed = await Sandbox.connect(sbx.sandboxId, h.opts);
    expect(await resumed.isRunning()).toBe(true);
    expect((await Sandbox.getInfo(sbx.sandboxId, h.opts)).state).toBe("running");
    await until(async () => (await readTicks(resumed)).some((t) => t.ms > resumeAt));

    const log = ticks(await resumed.files.read("/home/user/ticks"));
    // One process throughout: its counter never restarted nor skipped.
    expect(log.map((t) => t.n)).toEqual(log.map((_, i) => i + 1));
    // Not a tick while it was paused, and ticks again after.
    expect(log.filter((t) => t.ms >= pausedAt && t.ms <= resumeAt)).toEqual([]);
    expect(log.some((t) => t.ms < pausedAt)).toBe(true);
    expect(await resumed.files.read("/tmp/keep.txt")).toBe("kept in /tmp");
    expect((await resumed.commands.list()).map((p) => p.pid)).toContain(bg.pid);
    await resumed.kill();
  });

  it("a paused sandbox's timeout does not run; pause twice is E2B's 409 (false); connect sets a new timeout; resume of a running one is 409", async () => {
    const sbx = await Sandbox.create({ ...h.opts, timeoutMs: 2_000 });
    expect(await sbx.pause()).toBe(true);
    expect(await sbx.pause()).toBe(false);
    // wait: past the sandbox's 2 s timeout, which must not run while it is paused (a timeout firing late on a loaded box could only pass this wrongly)
    await sleep(3_500);
    expect((await Sandbox.getInfo(sbx.sandboxId, h.opts)).state).toBe("paused");
    const before = Date.now();
    await Sandbox.connect(sbx.sandboxId, { ...h.opts, timeoutMs: 60_000 });
    const info = await Sandbox.getInfo(sbx.sandboxId, h.opts);
    expect(info.state).toBe("running");
    expect(info.endAt.getTime()).toBeGreaterThanOrEqual(before + 59_000);
    const res = await fetch(`${h.url}/sandboxes/${sbx.sandboxId}/resume`, { method: "POST", headers: { "x-api-key": h.apiKey, "content-type": "application/json" }, body: "{}" });
    expect(res.status).toBe(409);
    await sbx.kill();
  });

  it("lifecycle onTimeout 'pause': the timeout pauses instead of killing; with autoResume a request to the sandbox's API resumes it, without it connect must", { timeout: 60_000 }, async () => {
    const woken = await Sandbox.create({ ...h.opts, timeoutMs: 2_000, lifecycle: { onTimeout: "pause", autoResume: true } });
    const asleep = await Sandbox.create({ ...h.opts, timeoutMs: 2_000, lifecycle: { onTimeout: "pause" } });
    await woken.files.write("/home/user/note.txt", "still here");
    await until(async () => (await Sandbox.getInfo(woken.sandboxId, h.opts)).state === "paused" && (await Sandbox.getInfo(asleep.sandboxId, h.opts)).state === "paused");
    // A request to the API of the auto-resuming one wakes it (as E2B's traffic does).
    expect(await woken.files.read("/home/user/note.txt")).toBe("still here");
    expect((await Sandbox.getInfo(woken.sandboxId, h.opts)).state).toBe("running");
    // The other stays paused until connect.
    expect(await asleep.isRunning()).toBe(false);
    expect((await Sandbox.getInfo(asleep.sandboxId, h.opts)).state).toBe("paused");
    await asleep.connect();
    expect(await asleep.isRunning()).toBe(true);
    await Promise.all([woken.kill(), asleep.kill()]);
  });

  it("pause with keepMemory: false is filesystem-only: the processes end, the files stay, the boot id is new (a reboot); a pause with memory keeps it", async () => {
    const sbx = await Sandbox.create(h.opts);
    const bootId = async (): Promise<string> => (await sbx.commands.run("cat /proc/sys/kernel/random/boot_id")).stdout.trim();
    const boot0 = await bootId();
    expect(boot0).toMatch(/^[0-9a-f-]{36}$/);
    expect(await sbx.pause()).toBe(true);
    await sbx.connect();
    expect(await bootId()).toBe(boot0);
    await sbx.files.write("/home/user/kept.txt", "kept");
    await sbx.commands.run("sleep 600", { background: true });
    expect(await sbx.pause({ keepMemory: false })).toBe(true);
    expect((await Sandbox.getInfo(sbx.sandboxId, h.opts)).state).toBe("paused");
    await sbx.connect();
    expect(await sbx.files.read("/home/user/kept.txt")).toBe("kept");
    expect(await sbx.commands.list()).toEqual([]);
    const boot1 = await bootId();
    expect(boot1).toMatch(/^[0-9a-f-]{36}$/);
    expect(boot1).not.toBe(boot0);
    await sbx.kill();
  });

  it("kill of a paused sandbox releases its slot: the next sandbox gets it, reset (no files, no processes)", { timeout: 60_000 }, async () => {
    const a = await Sandbox.create(h.opts);
    const b = await Sandbox.create(h.opts);
    await a.files.write("/home/user/left.txt", "from a");
    await a.commands.run("sleep 600", { background: true });
    await a.pause();
    const slotOfA = h.server.registry.get(a.sandboxId)!.slot.key;
    // Both slots are held: the next create waits for one.
    let created: Sandbox | undefined;
    const next = Sandbox.create(h.opts).then((s) => (created = s));
    // wait: a window in which the create must not complete (it waits for a slot): on a loaded box it can only show less
    await sleep(1_000);
    expect(created).toBeUndefined();
    expect(await Sandbox.kill(a.sandboxId, h.opts)).toBe(true);
    const c = await next;
    expect(h.server.registry.get(c.sandboxId)!.slot.key).toBe(slotOfA);
    expect(await c.files.exists("/home/user/left.txt")).toBe(false);
    expect(await c.commands.list()).toEqual([]);
    expect((await c.commands.run("echo ok")).stdout).toBe("ok\n");
    await Promise.all([b.kill(), c.kill()]);
  });
});
