/**
 * Disk bounded per slot (issue 11, hole 3). `--disk-mb` bounds /tmp and /var/tmp of every
 * slot (a tmpfs of that size in the slot's namespaces, root or not); with
 * `--disk-workspace` (root) the workspace, /tmp and /var/tmp share one tmpfs of that size
 * per slot. A slot that writes past it gets a write error (ENOSPC), the other slots and the
 * server keep working, and reset frees the space.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { isRoot, startAttackServer, type AttackServer } from "./support.js";

const write = (path: string, mb: number) => `dd if=/dev/zero of=${path} bs=1M count=${mb} 2>&1; echo "rc=$?"`;

describe("--disk-mb bounds a slot's /tmp (any user)", () => {
  let server: AttackServer;
  beforeAll(async () => {
    server = await startAttackServer({ slots: 2, extraArgs: ["--disk-mb", "20"] });
  }, 90_000);
  afterAll(async () => {
    await server?.stop();
  });

  it("a write past the bound fails with ENOSPC; the slot's next namespace (after reset) has the space again", async () => {
    const r = await server.bash(0, write("/tmp/big", 30));
    expect(r.output).toMatch(/No space left on device/);
    expect(r.output).toMatch(/rc=1/);
    expect((await server.reset(0)).json?.success).toBe(true);
    const again = await server.bash(0, write("/tmp/fits", 15));
    expect(again.output).toMatch(/rc=0/);
  }, 60_000);
});

describe.runIf(isRoot)("--disk-workspace (root): workspace, /tmp and /var/tmp share one bound per slot", () => {
  let server: AttackServer;
  beforeAll(async () => {
    server = await startAttackServer({ slots: 2, extraArgs: ["--disk-mb", "20", "--disk-workspace"] });
  }, 90_000);
  afterAll(async () => {
    await server?.stop();
  });

  it("workspace + /tmp past the bound: ENOSPC in that slot only; the other slot and the server keep working; reset frees it", async () => {
    expect((await server.bash(0, write("/workspace/a", 12))).output).toMatch(/rc=0/);
    const over = await server.bash(0, write("/tmp/b", 12));
    expect(over.output).toMatch(/No space left on device/);
    // write_file through the server is bounded too.
    const viaTool = await server.tool(0, "write_file", { path: "c.txt", content: "x".repeat(9 * 1024 * 1024) });
    expect(viaTool.success).toBe(false);
    // The other slot has its own bound, untouched.
    expect((await server.bash(1, write("/workspace/a", 15))).output).toMatch(/rc=0/);
    expect((await server.health()).status).toBe(200);
    expect((await server.reset(0)).json?.success).toBe(true);
    const df = await server.bash(0, "df -k /workspace | tail -1 | awk '{print $3}'");
    expect(Number(df.output.trim())).toBeLessThan(1024);
    expect((await server.bash(0, write("/workspace/again", 15))).output).toMatch(/rc=0/);
  }, 60_000);
});
