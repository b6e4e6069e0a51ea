import { CommandExitError, Sandbox, TimeoutError } from "e2b";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startE2b, type E2bHarness } from "./helpers.js";

/**
 * A sandbox killed while a command runs (issue 30): the command's stream is dropped as E2B's
 * is when its VM goes, the in-sandbox /health answers 502 "was not found", and the SDK
 * raises its TimeoutError "the sandbox was killed or reached its end of life" (before: a
 * CommandExitError with exit code -1, as if the command had failed). A command killed on
 * its own still ends with its signal, and other sandboxes' commands run on.
 */
describe("killing a sandbox while a command runs", () => {
  let h: E2bHarness;
  beforeAll(async () => {
    h = await startE2b({ slots: 3 });
  }, 120_000);
  afterAll(async () => {
    await h?.stop();
  });

  it("raises the SDK's TimeoutError naming the end of the sandbox; /health says it was not found; a sibling's command runs on", async () => {
    const [a, b] = await Promise.all([Sandbox.create(h.opts), Sandbox.create(h.opts)]);
    try {
      const cmd = await a.commands.run("sleep 60", { background: true });
      const other = await b.commands.run("sleep 2; echo survived", { background: true });
      await a.kill();
      const err = (await cmd.wait().catch((e: unknown) => e)) as Error;
      expect(err).toBeInstanceOf(TimeoutError);
      expect(err.message).toContain("sandbox was killed or reached its end of life");
      const health = await fetch(`${h.url}/health`, { headers: { "e2b-sandbox-id": a.sandboxId } });
      expect(health.status).toBe(502);
      expect(await health.text()).toContain(`sandbox '${a.sandboxId}' was not found`);
      expect((await other.wait()).stdout).toBe("survived\n");
    } finally {
      await b.kill();
    }
  }, 60_000);

  it("a command killed on its own (the sandbox lives on) still ends with CommandExitError and its signal", async () => {
    const s = await Sandbox.create(h.opts);
    try {
      const cmd = await s.commands.run("sleep 60", { background: true });
      expect(await cmd.kill()).toBe(true);
      const err = await cmd.wait().catch((e: unknown) => e);
      expect(err).toBeInstanceOf(CommandExitError);
      expect((err as CommandExitError).error).toContain("killed");
      expect((await s.commands.run("echo alive")).stdout).toBe("alive\n");
    } finally {
      await s.kill();
    }
  }, 60_000);
});
