/**
 * examples/web-form (issue 40): a web app the task starts in the trajectory's slot, an oracle
 * that books through the browser tools, and a reward that reads the page the model left in
 * the same browser session. Run as users run it (`slotpool process`, local provisioner), on the
 * Nomad provisioner (the API emulator's allocations are real sandbox servers), and with
 * policies that stop short, to show the reward reads the model's own page.
 */
import { spawn } from "node:child_process";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import WebFormEnv, { type Booking } from "../../examples/web-form/env.js";
import type { OracleScript } from "../../src/agent/oracle-policy.js";
import type { AgentResult } from "../../src/agent/agent-loop.js";
import type { ToolContext } from "../../src/env/tool-context.js";
import { silentLogger } from "../../src/observability/logger.js";
import { slotpoolCommand } from "../../src/pool/slotpool-command.js";
import { chromium } from "../sandbox/browser-helpers.js";
import { startNomadEmulator, type NomadEmulator } from "../support/nomad-emulator.js";

function runCli(args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const { command, args: base } = slotpoolCommand();
  return new Promise((resolve) => {
    const child = spawn(command, [...base, ...args], { stdio: ["ignore", "pipe", "pipe"], env: process.env });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (c: Buffer) => (stdout += c.toString()));
    child.stderr.on("data", (c: Buffer) => (stderr += c.toString()));
    child.on("exit", (code) => resolve({ code, stdout, stderr }));
  });
}

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "web-form-"));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe.skipIf(!chromium)("examples/web-form (skipped without Chromium)", () => {
  it("slotpool process examples/web-form/env.js: every booking made through the browser, 100 % on the oracle (local provisioner)", async () => {
    const out = join(dir, "web-form.jsonl");
    const r = await runCli(["process", "examples/web-form/env.js", "--out", out, "--no-progress", "--no-report"]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/success rate\s+100\.0% \(8 of 8 written/);
    expect(r.stdout).toMatch(/infra failures\s+0/);
    expect(r.stdout).toMatch(/browser_navigate\s+8\s+0/);
    const groups = (await readFile(out, "utf8")).trim().split("\n").map((l) => JSON.parse(l) as { scores: number[] });
    expect(groups).toHaveLength(4);
    for (const g of groups) expect(g.scores).toEqual([1, 1]);
  }, 240_000);

  it("the reward reads the page the model left, in its own browser session: a model that stops before submitting, or leaves the confirmation, scores 0", async () => {
    const stopAt = new Map<number, number>();
    class StoppingEnv extends WebFormEnv {
      override oracle(b: Booking): OracleScript {
        const inner = super.oracle(b);
        const last = stopAt.get(b.id)!;
        return (input) => (input.turn > last ? { final: "stopping here" } : inner(input));
      }
    }
    class WanderingEnv extends WebFormEnv {
      // Submits, then goes back to the form: the booking is stored, but the page it leaves is not the confirmation.
      override oracle(b: Booking): OracleScript {
        const inner = super.oracle(b);
        return (input) => (input.turn === 6 ? { toolCalls: [{ name: "browser_back", arguments: {} }] } : input.turn === 7 ? { final: "done" } : inner(input));
      }
    }
    const env = new StoppingEnv({ groupSize: 1 }, { logger: silentLogger() });
    await env.start();
    const scores: number[] = [];
    for (const turns of [1, 3, 5]) {
      const item = env.getNextItem();
      stopAt.set(item.id, turns);
      const o = await env.collectTrajectories(item);
      if (!o.ok) throw new Error(`group failed: ${JSON.stringify(o)}`);
      scores.push(o.group.scores[0]!);
    }
    await env.close();
    // Opened the page only / filled the form without submitting / submitted: only the last is booked.
    expect(scores).toEqual([0, 0, 1]);
    const wandering = new WanderingEnv({ groupSize: 1 }, { logger: silentLogger() });
    await wandering.start();
    const o = await wandering.collectTrajectories(wandering.getNextItem());
    await wandering.close();
    if (!o.ok) throw new Error(`group failed: ${JSON.stringify(o)}`);
    expect(o.group.scores).toEqual([0]);
  }, 240_000);

  it("a reward has the browser on its ToolContext: typed helpers and callTool reach the session the model used", async () => {
    const seen: Array<Record<string, unknown>> = [];
    class HelperEnv extends WebFormEnv {
      override async computeReward(b: Booking, result: AgentResult, ctx: ToolContext): Promise<number> {
        const viaHelper = await ctx.browserSnapshot();
        const viaCall = await ctx.callTool("browser_snapshot", {});
        const images = await ctx.browserGetImages();
        // The reward may act on the page too: back to the form, fill the name, read it back.
        await ctx.browserNavigate("http://127.0.0.1:8080/");
        const form = await ctx.browserSnapshot();
        const nameRef = form.snapshot.split("\n").find((l) => l.includes('textbox "Full name"'))!.match(/\[ref=([a-z0-9]+)\]/)![1]!;
        await ctx.browserType(`@${nameRef}`, "checked by the reward");
        const filled = await ctx.browserSnapshot({ full: true });
        const stale = await ctx.browserClick("@e9999").then(
          () => "no error",
          (err: Error) => err.name,
        );
        seen.push({ helperTitle: viaHelper.title, helperOk: viaHelper.ok, sameTree: viaCall.output.endsWith(viaHelper.snapshot), images: images.length, filled: /textbox "Full name" .*: checked by the reward$/m.test(filled.snapshot), stale });
        return super.computeReward(b, result, ctx);
      }
    }
    const env = new HelperEnv({ groupSize: 1 }, { logger: silentLogger() });
    await env.start();
    const o = await env.collectTrajectories(env.getNextItem());
    await env.close();
    if (!o.ok) throw new Error(`group failed: ${JSON.stringify(o)}`);
    expect(seen).toEqual([{ helperTitle: "Booked", helperOk: true, sameTree: true, images: 0, filled: true, stale: "ToolContextError" }]);
    // The helpers ran after the model's page was read: the reward acted on the form, so it is 0 here.
    expect(o.group.scores).toEqual([0]);
  }, 120_000);

  it("a reward whose trajectory never opened a page reads ok: false, not an error", async () => {
    let snapshot: unknown;
    class NoBrowserEnv extends WebFormEnv {
      override oracle(): OracleScript {
        return () => ({ final: "I did nothing" });
      }
      override async computeReward(_b: Booking, _r: AgentResult, ctx: ToolContext): Promise<number> {
        snapshot = await ctx.browserSnapshot();
        return 0;
      }
    }
    const env = new NoBrowserEnv({ groupSize: 1 }, { logger: silentLogger() });
    await env.start();
    const o = await env.collectTrajectories(env.getNextItem());
    await env.close();
    expect(o.ok).toBe(true);
    expect(snapshot).toMatchObject({ ok: false, snapshot: "", error: expect.stringMatching(/no page is open/) });
  }, 120_000);
});

describe.skipIf(!chromium)("examples/web-form on the Nomad provisioner (API emulator; skipped without Chromium)", () => {
  let nomad: NomadEmulator;
  const savedAddr = process.env["NOMAD_ADDR"];
  beforeAll(async () => {
    nomad = await startNomadEmulator({ rescheduleDelayMs: 100 });
    process.env["NOMAD_ADDR"] = nomad.address;
  });
  afterAll(async () => {
    if (savedAddr === undefined) delete process.env["NOMAD_ADDR"];
    else process.env["NOMAD_ADDR"] = savedAddr;
    await nomad?.stop();
  });

  it("books every seat through the browser, 100 % on the oracle", async () => {
    const jobId = `web-form-${process.pid}`;
    const env = new WebFormEnv({ groupSize: 2, pool: { provisioner: "nomad", nomad: { jobId }, slotsPerContainer: 2, minContainers: 1, maxContainers: 2 } }, { logger: silentLogger() });
    await env.start();
    const scores: number[] = [];
    for (let i = 0; i < 2; i++) {
      const o = await env.collectTrajectories(env.getNextItem());
      if (!o.ok) throw new Error(`group failed: ${JSON.stringify(o)}`);
      scores.push(...o.group.scores);
    }
    await env.close();
    expect(scores).toEqual([1, 1, 1, 1]);
  }, 180_000);
});
