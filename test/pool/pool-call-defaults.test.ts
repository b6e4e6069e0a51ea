/**
 * What a pool's own calls get when they say nothing (issue 32 items 5 and 9), on real sandbox
 * servers: the network is loopback only unless asked (as the executor's and the env's
 * default), given once; a call the slot refuses is an error result in the executor's shape,
 * not a throw; a transport failure still throws. Template builds keep the servers' own
 * network setting (their setup is the env's, e.g. a pip install).
 */
import { chmod, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { SandboxRequestError, SlotLostError } from "../../src/pool/errors.js";
import { LocalProvisioner } from "../../src/pool/local-provisioner.js";
import { SlotPool } from "../../src/pool/slot-pool.js";
import type { LeasedSlot } from "../../src/pool/types.js";

let baseDir: string;
const pools: SlotPool[] = [];

beforeAll(async () => {
  baseDir = await mkdtemp(join(tmpdir(), "slotpool-calldefaults-"));
  await chmod(baseDir, 0o755);
});
afterEach(async () => {
  for (const p of pools.splice(0)) await p.stop();
});
afterAll(async () => {
  await rm(baseDir, { recursive: true, force: true });
});

function localPool(provisionerOptions: { allowNetwork?: boolean } = {}, poolOptions: { allowNetwork?: boolean } = {}): SlotPool {
  const provisioner = new LocalProvisioner({ slotsPerContainer: 2, baseDir: join(baseDir, `p${pools.length}`), ...provisionerOptions });
  const pool = new SlotPool({ provisioner, minContainers: 1, maxContainers: 1, ...poolOptions });
  pools.push(pool);
  return pool;
}

/** Network interfaces other than lo that a command in the slot sees. */
const NON_LOOPBACK = "tail -n +3 /proc/net/dev | awk -F: '$1 !~ /lo$/' | wc -l";

async function interfaces(slot: LeasedSlot, extra: Record<string, unknown> = {}): Promise<{ count: number; isolated: unknown }> {
  const r = await slot.execute({ tool: "bash", args: { command: NON_LOOPBACK, ...extra } });
  expect(r.success, r.error).toBe(true);
  return { count: Number(r.output.trim()), isolated: r.metadata.network_isolated };
}

describe("a pool's network default: loopback only unless asked", () => {
  it("the docs/pool.md example (no network option anywhere): a call without allow_network has loopback only; one that asks gets network", async () => {
    const pool = localPool();
    expect(pool.allowNetwork).toBe(false);
    await pool.start();
    const slot = await pool.acquire({ trajectoryId: "net-default" });
    expect(await interfaces(slot)).toEqual({ count: 0, isolated: true });
    // The batch path too (the executor's path for several calls).
    const [batched] = await slot.executeBatch([{ tool: "bash", args: { command: NON_LOOPBACK } }, { tool: "bash", args: { command: "true" } }]);
    expect(batched!.metadata.network_isolated).toBe(true);
    expect(Number(batched!.output.trim())).toBe(0);
    const asked = await interfaces(slot, { allow_network: true });
    expect(asked.isolated).toBe(false);
    await pool.release(slot);
  });

  it("allowNetwork: true on the provisioner is the pool's default too (given once); a contradicting pool option is refused naming both", async () => {
    const pool = localPool({ allowNetwork: true });
    expect(pool.allowNetwork).toBe(true);
    await pool.start();
    const slot = await pool.acquire({ trajectoryId: "net-on" });
    expect((await interfaces(slot)).isolated).toBe(false);
    // A call can still turn it off.
    expect(await interfaces(slot, { allow_network: false })).toEqual({ count: 0, isolated: true });
    await pool.release(slot);
    expect(() => new SlotPool({ provisioner: new LocalProvisioner({ slotsPerContainer: 1, allowNetwork: false }), allowNetwork: true })).toThrow(
      /allowNetwork disagrees: the local provisioner prepares its slots for network off, the pool was told on; give it once/,
    );
    expect(() => new LocalProvisioner({ slotsPerContainer: 1, allowNetwork: "yes" as unknown as boolean })).toThrow(/allowNetwork must be true or false, got "yes"/);
  });

  it("a template build keeps the server's network (its setup may download), while the slot's own calls stay loopback only", async () => {
    const pool = localPool();
    await pool.start();
    const slot = await pool.acquire({ trajectoryId: "tpl" });
    await pool.useTemplate(slot, { name: "net-probe", setup: [`${NON_LOOPBACK} > build-ifaces`] });
    const built = await slot.execute({ tool: "bash", args: { command: "cat build-ifaces" } });
    expect(Number(built.output.trim())).toBeGreaterThan(0);
    expect(await interfaces(slot)).toEqual({ count: 0, isolated: true });
    await pool.release(slot);
  });
});

describe("one call shape: a refused call is an error result, as the executor's", () => {
  it("a path outside the workspace, an empty command and an unknown tool resolve to success false with the reason; a batch with one refused call runs the others", async () => {
    const pool = localPool();
    await pool.start();
    const slot = await pool.acquire({ trajectoryId: "refused" });
    const outside = await slot.execute({ tool: "read_file", args: { path: "/etc/passwd" }, execution_id: "e1" });
    expect(outside).toEqual({
      success: false,
      output: "",
      error: expect.stringMatching(/^invalid args for read_file: path is outside the workspace.*\(field args\.path\)$/),
      execution_id: "e1",
      metadata: { tool_error: "ToolArgumentsError", refused: true },
    });
    const escape = await slot.execute({ tool: "read_file", args: { path: "../../etc/passwd" } });
    expect(escape.success).toBe(false);
    expect(escape.error).toMatch(/escapes the workspace/);
    expect((await slot.execute({ tool: "bash", args: { command: "" } })).error).toMatch(/command must not be empty/);
    const unknown = await slot.execute({ tool: "nosuch", args: {} });
    expect(unknown.metadata).toEqual({ tool_error: "UnknownToolError", refused: true });

    const streamed: Array<[number, boolean]> = [];
    const batch = await slot.executeBatch(
      [
        { tool: "write_file", args: { path: "a.txt", content: "one" } },
        { tool: "read_file", args: { path: "/etc/shadow" } },
        { tool: "bash", args: { command: "cat a.txt" } },
      ],
      (i, r) => streamed.push([i, r.success]),
    );
    expect(batch.map((r) => r.success)).toEqual([true, false, true]);
    expect(batch[1]!.error).toMatch(/outside the workspace/);
    expect(batch[2]!.output).toBe("one");
    expect(streamed).toEqual([[0, true], [1, false], [2, true]]);
    // Without the streaming path as well.
    const plain = await slot.executeBatch([{ tool: "read_file", args: { path: "/x" } }, { tool: "bash", args: { command: "echo ok" } }]);
    expect(plain.map((r) => r.success)).toEqual([false, true]);
    await pool.release(slot);
  });

  it("a transport failure still throws (a lost container is SlotLostError, not a result)", async () => {
    const provisioner = new LocalProvisioner({ slotsPerContainer: 1, baseDir: join(baseDir, "lost") });
    const pool = new SlotPool({ provisioner, minContainers: 1, maxContainers: 1 });
    pools.push(pool);
    await pool.start();
    const slot = await pool.acquire({ trajectoryId: "lost" });
    process.kill(provisioner.processes()[0]!.pid, "SIGKILL");
    const err = await slot.execute({ tool: "bash", args: { command: "true" } }).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err instanceof SlotLostError || err instanceof SandboxRequestError).toBe(true);
    await pool.release(slot).catch(() => undefined);
  });
});
