import { readFileSync } from "node:fs";
import { Sandbox } from "e2b";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parseProbe, probeBinary, probeProblems } from "../security/kernel-probe.js";
import { startE2b, type E2bHarness } from "./helpers.js";

/**
 * The kernel surface in an E2B sandbox (issue 28): code written for E2B, through the real e2b
 * SDK, runs under the slots' seccomp filter like any slot process (E2B commands are process
 * sessions). The kernel probe (test/security/fixtures/kernel-probe.c) sees every primitive refused.
 */
describe("E2B sandboxes under the slots' seccomp filter", () => {
  let h: E2bHarness;
  let sbx: Sandbox;
  beforeAll(async () => {
    h = await startE2b({ slots: 1 });
    sbx = await Sandbox.create({ ...h.opts });
  }, 120_000);
  afterAll(async () => {
    await h?.stop();
  });

  it("the kernel probe: every primitive refused in an E2B sandbox", async () => {
    const bin = readFileSync(probeBinary());
    await sbx.files.write("/home/user/kernel-probe", bin.buffer.slice(bin.byteOffset, bin.byteOffset + bin.byteLength) as ArrayBuffer);
    const r = await sbx.commands.run("chmod +x /home/user/kernel-probe && /home/user/kernel-probe", { timeoutMs: 60_000 });
    expect(r.exitCode).toBe(0);
    expect(probeProblems(parseProbe(r.stdout)), r.stdout).toEqual([]);
    // A background command (a process session kept running) is filtered too.
    const bg = await sbx.commands.run("awk '/^Seccomp:/{print $2}' /proc/self/status; unshare -U true 2>/dev/null || echo refused", { background: true });
    const done = await bg.wait();
    expect(done.stdout).toBe("2\nrefused\n");
  });
});
