import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ToolExecutor } from "../../src/executor/tool-executor.js";
import { ToolServer } from "../../src/executor/tool-server.js";
import { ExecutorServer } from "../../src/executor/executor-server.js";
import { SlotLostError } from "../../src/pool/errors.js";
import { ToolExecutorConfigError } from "../../src/executor/config.js";
import type { ToolResult } from "../../src/protocol/tool.js";
import { DirectSlotPool } from "./support/direct-slot-pool.js";
import { RecordingPool } from "./support/recording-pool.js";
import { startSandboxes, type Sandboxes } from "./support/sandboxes.js";
import { testTools } from "./support/echo-tools.js";
import { z } from "zod";
import { defineTool } from "../../src/tools/definition.js";
import { ToolRegistry } from "../../src/tools/registry.js";

/** Executor behaviour against real sandbox servers (through a minimal pool double). */

let sandboxes: Sandboxes;
let pool: DirectSlotPool;
let executor: ToolExecutor;
let seq = 0;
const tid = (name: string) => `${name}-${++seq}`;
const bash = (command: string, extra: Record<string, unknown> = {}) => ({ name: "bash", arguments: { command, ...extra } });

beforeAll(async () => {
  sandboxes = await startSandboxes(1, 8);
  pool = new DirectSlotPool(sandboxes.containers);
  executor = new ToolExecutor({ pool, config: { batchWindowMs: 5 } });
  await executor.start();
});

afterAll(async () => {
  await executor?.close();
  await pool?.stop();
  await sandboxes?.stop();
});

describe("ToolExecutor against real sandbox servers", () => {
  it("runs a trajectory's calls in the order they were issued, within and across batch windows", async () => {
    const t = tid("order");
    const issued = [
      executor.execute(t, bash("sleep 0.3; echo 1 >> log.txt")),
      executor.execute(t, bash("echo 2 >> log.txt")),
      executor.execute(t, bash("sleep 0.1; echo 3 >> log.txt")),
    ];
    // wait: a later batch window, while the first call still runs (if the box is slow and it has ended, the order still must hold)
    await new Promise((r) => setTimeout(r, 60));
    issued.push(executor.execute(t, bash("echo 4 >> log.txt")));
    issued.push(executor.execute(t, { name: "terminal", arguments: { command: "cat log.txt" } }));
    const done: number[] = [];
    issued.forEach((p, i) => void p.then(() => done.push(i)));
    const results = await Promise.all(issued);
    expect(results.every((r) => r.success)).toBe(true);
    expect(results[4]!.output.trim().split("\n")).toEqual(["1", "2", "3", "4"]);
    expect(done).toEqual([0, 1, 2, 3, 4]);
    await executor.release(t);
  });

  it("does not make one trajectory wait for another's slow call", async () => {
    const slow = tid("slow");
    const fast = tid("fast");
    await Promise.all([executor.execute(slow, bash("true")), executor.execute(fast, bash("true"))]); // both hold slots
    let slowDone = false;
    const slowCall = executor.execute(slow, bash("sleep 4; echo slow")).then((r) => {
      slowDone = true;
      return r;
    });
    // wait: lets the slow call reach its slot first (no event says so); the fast one must not wait either way.
    await new Promise((r) => setTimeout(r, 20));
    const fastResult = await executor.execute(fast, bash("true"));
    expect(fastResult.success).toBe(true);
    // The fast call came back while the slow one still ran: the event, not a bound on its time.
    expect(slowDone).toBe(false);
    expect((await slowCall).output).toBe("slow");
    await Promise.all([executor.release(slow), executor.release(fast)]);
  });

  it("delivers each result of a batch as soon as its call finishes", async () => {
    const t = tid("stream");
    await executor.execute(t, bash("true"));
    const first = executor.execute(t, bash("echo first"));
    let secondDone = false;
    const second = executor.execute(t, bash("sleep 3; echo second")).finally(() => (secondDone = true));
    const r1 = await first;
    expect(r1.output).toBe("first");
    // The first call's answer did not wait for the second call (the event, not a bound).
    expect(secondDone).toBe(false);
    expect((await second).output).toBe("second");
    await executor.release(t);
  });

  it("acquires a slot on the first sandbox call, keeps it, and isolates trajectories", async () => {
    const a = tid("aff-a");
    const b = tid("aff-b");
    const before = pool.acquires;
    expect(executor.slotOf(a)).toBeUndefined();
    await executor.execute(a, { name: "write_file", arguments: { path: "secret.txt", content: "from a" } });
    const slotA = executor.slotOf(a)!;
    expect(slotA).toBeDefined();
    const read = await executor.execute(a, { name: "read_file", arguments: { path: "secret.txt" } });
    expect(read.output).toBe("from a");
    expect(executor.slotOf(a)).toBe(slotA);
    const other = await executor.execute(b, bash("cat secret.txt"));
    expect(other.success).toBe(false);
    expect(executor.slotOf(b)!.key).not.toBe(slotA.key);
    expect(pool.acquires - before).toBe(2);
    await Promise.all([executor.release(a), executor.release(b)]);
  });

  it("returns the slot on release (reset by default) and acquires a fresh one afterwards", async () => {
    const t = tid("release");
    await executor.execute(t, bash("echo keep > kept.txt"));
    const held = pool.heldCount();
    await executor.release(t);
    expect(pool.heldCount()).toBe(held - 1);
    expect(pool.releases.at(-1)).toMatchObject({ reset: true });
    const again = await executor.execute(t, bash("cat kept.txt 2>&1 || echo missing"));
    expect(again.output).toContain("missing");
    await executor.release(t, { reset: false });
    expect(pool.releases.at(-1)).toMatchObject({ reset: false });
    await executor.release("never-seen"); // no-op
  });

  it("answers unknown tools and invalid arguments with error results, without acquiring a slot", async () => {
    const t = tid("bad");
    const before = pool.acquires;
    const unknown = await executor.execute(t, { name: "web_search", arguments: { q: "x" }, uniq_id: "u1" });
    expect(unknown).toMatchObject({ success: false, uniq_id: "u1" });
    expect(unknown.error).toMatch(/unknown tool 'web_search'; available tools: bash, bash_stateful, tmux, read_file, write_file/);
    const invalid = await executor.execute(t, { name: "bash", arguments: { cmd: "ls" } });
    expect(invalid.success).toBe(false);
    expect(invalid.error).toMatch(/invalid arguments for tool 'bash': command:/);
    const external = await executor.execute(t, { name: "bash", arguments: { command: "true" } });
    expect(external.success).toBe(true);
    expect(pool.acquires - before).toBe(1);
    await executor.release(t);
  });

  it("clamps a too-small timeout to 1 s and kills a command at its timeout", async () => {
    const t = tid("timeout");
    const ok = await executor.execute(t, bash("sleep 0.4; echo done", { timeout: 0.01 }));
    expect(ok).toMatchObject({ success: true, output: "done" });
    const t0 = performance.now();
    const killed = await executor.execute(t, bash("sleep 30"), { timeoutMs: 1000 });
    expect(killed.success).toBe(false);
    expect(killed.metadata["timeout"]).toBe(true);
    // bound: cut at its 1 s timeout, not after the command's 30 s: 10 s leaves a loaded box 9 s.
    expect(performance.now() - t0).toBeLessThan(10_000);
    await executor.release(t);
  });

  it("stamps policy from config, not from the model: the model cannot turn the network on", async () => {
    const closed = new ToolExecutor({ pool, config: { allowNetwork: false, batchWindowMs: 1 } });
    await closed.start();
    const t = tid("policy");
    const r = await closed.execute(t, bash("echo hi", { allow_network: true, require_sandbox: false }));
    expect(r.success).toBe(true);
    expect(r.metadata["network_isolated"]).toBe(true);
    await closed.close();
  });

  it("reads, lists and archives a trajectory's artifacts", async () => {
    const t = tid("art");
    const none = await executor.readArtifact(t, { path: "a.txt" });
    expect(none.success).toBe(false);
    expect(none.error).toMatch(/holds no slot/);
    await executor.execute(t, bash("mkdir -p out && echo hello > out/a.txt"));
    const read = await executor.readArtifact(t, { path: "out/a.txt" });
    expect(read).toMatchObject({ success: true, content: "hello\n" });
    const list = await executor.listArtifacts(t, { path: "out" });
    expect(list.success).toBe(true);
    expect(list.entries.map((e) => e.path)).toContain("out/a.txt");
    const archive = await executor.archiveArtifacts(t, { path: "out" });
    expect(archive.success).toBe(true);
    expect(Buffer.from(archive.content, "base64").subarray(0, 2)).toEqual(Buffer.from([0x1f, 0x8b]));
    await executor.release(t);
  });

  it("turns a cancelled call into an error result", async () => {
    const t = tid("abort");
    const ac = new AbortController();
    const p = executor.execute(t, bash("sleep 5"), { signal: ac.signal });
    setTimeout(() => ac.abort(), 100);
    const r = await p;
    expect(r.success).toBe(false);
    expect(r.error).toMatch(/cancelled/);
    await executor.release(t);
  });

  it("reports stats: totals, errors, latency", async () => {
    const s = executor.stats();
    expect(s.totals.calls).toBeGreaterThan(10);
    expect(s.totals.errors).toBeGreaterThan(0);
    expect(s.totals.sandbox).toBeGreaterThan(0);
    expect(s.latencyMs.count).toBe(s.totals.calls);
    expect(s.latencyMs.p99).toBeGreaterThanOrEqual(s.latencyMs.p50);
    expect(s.queued).toBe(0);
    expect(executor.metrics.registry.render()).toMatch(/slotpool_executor_calls_total\{kind="sandbox",tool="bash"\} \d+/);
  });
});

describe("ToolExecutor routing to a ToolServer", () => {
  let server: ToolServer;
  let url: string;
  beforeAll(async () => {
    server = new ToolServer({ tools: testTools(), token: "ts-token" });
    url = await server.listen(0, "127.0.0.1");
  });
  afterAll(async () => server?.close());

  it("discovers external tools and sends their calls with trajectory and slot ids", async () => {
    const ex = new ToolExecutor({ pool, config: { toolServerUrl: url, toolServerToken: "ts-token", batchWindowMs: 1 } });
    await ex.start();
    expect(ex.tools.resolve("echo_context")?.kind).toBe("external");
    const t = tid("ext");
    const before = await ex.execute(t, { name: "echo_context", arguments: { text: "no slot yet", allow_network: true }, uniq_id: "e1" });
    expect(before).toMatchObject({ success: true, output: "no slot yet", uniq_id: "e1", metadata: { trajectory_id: t, slot_id: null } });
    expect((before.metadata["args"] as Record<string, unknown>)["allow_network"]).toBeUndefined();
    await ex.execute(t, bash("true"));
    const after = await ex.execute(t, { name: "echo_context", arguments: { text: "with slot" } });
    expect(after.metadata).toMatchObject({ trajectory_id: t, slot_id: ex.slotOf(t)!.slotId, container_addr: ex.slotOf(t)!.container.url });
    expect(ex.stats().totals.external).toBe(2);
    await ex.close();
  });

  it("says so when the ToolServer refuses the token", async () => {
    const ex = new ToolExecutor({ pool, tools: undefined, config: { toolServerUrl: url, toolServerToken: "wrong", batchWindowMs: 1 } });
    ex.tools.register(testTools()[0]!);
    await ex.start();
    const r = await ex.execute(tid("ext-bad"), { name: "echo_context", arguments: { text: "x" } });
    expect(r.success).toBe(false);
    expect(r.error).toMatch(/refused our token \(HTTP 403\)/);
    await ex.close();
  });

  it("gives a clear error for external tools when no ToolServer is configured", async () => {
    const ex = new ToolExecutor({ pool, config: { batchWindowMs: 1 } });
    ex.tools.register(testTools()[0]!);
    await ex.start();
    const r = await ex.execute(tid("no-ts"), { name: "echo_context", arguments: { text: "x" } });
    expect(r.success).toBe(false);
    expect(r.error).toMatch(/external tool 'echo_context' is not available: no ToolServer is configured/);
    await ex.close();
  });
});

describe("ToolExecutor when a slot is lost", () => {
  it("fails this and every later call with the pool's SlotLostError; the HTTP service answers it as a slot_lost result", async () => {
    const sb = await startSandboxes(1, 2);
    const p = new DirectSlotPool(sb.containers);
    const ex = new ToolExecutor({ pool: p, config: { batchWindowMs: 1 } });
    try {
      await ex.start();
      const t = tid("lost");
      expect((await ex.execute(t, bash("echo x > f"))).success).toBe(true);
      const running = ex.execute(t, bash("sleep 10"));
      // wait: lets the call reach the server before the container dies (lost before or while it runs, the answer is the same loss).
      await new Promise((r) => setTimeout(r, 200));
      p.markLost(sb.containers[0]!.id, "allocation failed: OOM killed");
      sb.processes[0]!.child.kill("SIGKILL"); // the container dies: no graceful answer
      // In-process, one form: the pool's error, as the pool raised it.
      const err = await running.then((r) => r, (e: unknown) => e);
      expect(err).toBeInstanceOf(SlotLostError);
      expect(err).toMatchObject({ slotId: "slot_0", containerId: "local-0", code: "SLOT_LOST" });
      expect((err as SlotLostError).message).toMatch(/The workspace is gone/);
      await expect(ex.execute(t, bash("cat f"))).rejects.toBe(err);
      await expect(ex.readArtifact(t, { path: "f" })).rejects.toBe(err);
      expect(ex.stats().totals.errors).toBeGreaterThanOrEqual(2);
      // On the wire (the executor service), the original's shape: metadata.slot_lost and its keys.
      const server = new ExecutorServer({ executor: ex });
      const url = await server.listen(0, "127.0.0.1");
      try {
        const post = async (path: string, body: unknown) => (await fetch(`${url}${path}`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) })).json();
        const wire = (await post("/execute", { trajectory_id: t, tool: { ...bash("cat f"), uniq_id: "w1" } })) as ToolResult;
        expect(wire).toMatchObject({ success: false, uniq_id: "w1" });
        expect(wire.error).toMatch(/^workspace lost: .*The workspace is gone/);
        expect(wire.metadata).toEqual({ slot_lost: true, slot_id: "slot_0", allocation_id: "local-0", slot_key: "local-0/slot_0", reason: "allocation failed: OOM killed" });
        const art = (await post("/artifacts/read", { trajectory_id: t, path: "f" })) as Record<string, unknown>;
        expect(art).toMatchObject({ success: false, slot_lost: true, content: "", path: "f" });
        expect(art["error"]).toMatch(/^workspace lost/);
      } finally {
        await server.close(1_000);
      }
      await ex.release(t);
      expect(p.releases.at(-1)).toMatchObject({ key: "local-0/slot_0", reset: false });
    } finally {
      await ex.close();
      await p.stop();
      await sb.stop();
    }
  });
});

describe("ToolExecutor wire arguments", () => {
  it("clamps timeouts to [1, 600] s and overrides isolation arguments from config", async () => {
    const rec = new RecordingPool();
    const ex = new ToolExecutor({ pool: rec, config: { batchWindowMs: 0, allowNetwork: false, requireSandbox: true, requireStatefulSandbox: true, defaultTimeoutS: 45 } });
    await ex.start();
    await ex.execute("w", bash("a", { timeout: 100_000, allow_network: true, require_sandbox: false, require_stateful_sandbox: false }));
    await ex.execute("w", bash("b"));
    await ex.execute("w", { name: "terminal_stateful", arguments: { command: "c" } }, { timeoutMs: 10 });
    await ex.execute("w", { name: "tmux", arguments: { action: "capture" } }, { timeoutMs: 20_000 });
    expect(rec.sent.map((c) => [c.tool, c.timeout])).toEqual([
      ["bash", 600],
      ["bash", 45],
      ["bash_stateful", 1],
      ["tmux", 20],
    ]);
    // Each tool gets the isolation arguments its tool-table entry honours, from the config (never the model's).
    expect(rec.sent[0]!.args).toEqual({ command: "a", timeout: 600, allow_network: false, require_sandbox: true });
    expect(rec.sent[1]!.args).toEqual({ command: "b", allow_network: false, require_sandbox: true });
    for (const c of rec.sent.slice(2)) expect(c.args).toMatchObject({ allow_network: false, require_sandbox: true, require_stateful_sandbox: true });
    expect(rec.acquired).toBe(1);
    await ex.close();
  });

  it("routes by the tool's definition: an env tool's slotCommand goes out as bash with bash's isolation arguments; one that throws fails alone; an in-process tool is refused", async () => {
    const rec = new RecordingPool();
    const tools = ToolRegistry.withBuiltins([
      defineTool({ name: "count", description: "", kind: "sandbox", parameters: z.object({ path: z.string() }), slotCommand: ({ path }) => `wc -l < ${path}` }),
      defineTool({ name: "broken", description: "", kind: "sandbox", parameters: z.object({}), slotCommand: () => { throw new Error("no command today"); } }),
      defineTool({ name: "submit", description: "", kind: "in-process", parameters: z.object({}), run: () => "never here" }),
    ]);
    const ex = new ToolExecutor({ pool: rec, tools, config: { batchWindowMs: 5, allowNetwork: false, requireSandbox: true, defaultTimeoutS: 30 } });
    await ex.start();
    const [counted, broken, read] = await Promise.all([
      ex.execute("r", { name: "count", arguments: { path: "a.txt", allow_network: true } }),
      ex.execute("r", { name: "broken", arguments: {} }),
      ex.execute("r", { name: "read_file", arguments: { path: "a.txt" } }),
    ]);
    const submit = await ex.execute("r", { name: "submit", arguments: {} });
    expect(counted.success).toBe(true);
    expect(broken).toMatchObject({ success: false, error: "tool 'broken' could not build its command: no command today" });
    expect(read.success).toBe(true);
    expect(submit).toMatchObject({ success: false, error: expect.stringMatching(/tool 'submit' runs in the env's own process/) });
    expect(rec.sent).toEqual([
      { tool: "bash", args: { command: "wc -l < a.txt", timeout: 30, allow_network: false, require_sandbox: true }, execution_id: null, timeout: 30 },
      // read_file honours no isolation argument: none is sent.
      { tool: "read_file", args: { path: "a.txt" }, execution_id: null, timeout: 30 },
    ]);
    await ex.close();
  });

  it("dispatches a burst larger than maxBatchSize completely, in order", async () => {
    const rec = new RecordingPool();
    const ex = new ToolExecutor({ pool: rec, config: { batchWindowMs: 2, maxBatchSize: 3 } });
    await ex.start();
    const rs = await Promise.all(Array.from({ length: 10 }, (_, i) => ex.execute("burst", bash(`echo ${i}`))));
    expect(rs.every((r) => r.success)).toBe(true);
    expect(rec.sent.map((c) => c.args["command"])).toEqual(Array.from({ length: 10 }, (_, i) => `echo ${i}`));
    await ex.close();
  });

  it("returns a slot acquired for a trajectory released meanwhile exactly once", async () => {
    const rec = new RecordingPool();
    const released: string[] = [];
    const slow: RecordingPool = Object.assign(Object.create(rec) as RecordingPool, {
      acquire: async (o: { trajectoryId: string }) => {
        // wait: a slow acquire (the fake's own 200 ms), for the release below to arrive during it.
        await new Promise((r) => setTimeout(r, 200));
        return rec.acquire(o);
      },
      release: async (slot: { key: string }) => {
        released.push(slot.key);
      },
    });
    const ex = new ToolExecutor({ pool: slow, config: { batchWindowMs: 0 } });
    await ex.start();
    const call = ex.execute("late", bash("true"));
    // wait: dispatched, waiting for its slot — this timer fires before the fake acquire's 200 ms one however loaded the box (one event loop orders them)
    await new Promise((r) => setTimeout(r, 50));
    await ex.release("late");
    const r = await call;
    expect(r.success).toBe(false);
    expect(r.error).toMatch(/released/);
    expect(released).toEqual(["rec-0/slot_0"]);
    expect(rec.sent).toEqual([]);
    await ex.close();
    expect(released).toHaveLength(1);
  });

  it("rejects bad config with a message naming the field", () => {
    expect(() => new ToolExecutor({ pool: new RecordingPool(), config: { maxBatchSize: 0 } })).toThrow(ToolExecutorConfigError);
    expect(() => new ToolExecutor({ pool: new RecordingPool(), config: { toolServerUrl: "ftp://x" } })).toThrow(/toolServerUrl/);
  });
});
