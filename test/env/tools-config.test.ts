import { afterEach, describe, expect, it } from "vitest";
import { EnvConfigError, NoPolicyError } from "../../src/env/errors.js";
import { silentLogger } from "../../src/observability/logger.js";
import { startLlmServer, type LlmServer } from "../support/llm-server.js";
import { fakeBackend } from "./support/fake-backend.js";
import { WriteFileEnv } from "./support/counting-env.js";

let llm: LlmServer | undefined;
afterEach(async () => {
  await llm?.close();
  llm = undefined;
});

const toolNames = (body: { tools?: unknown[] }) => (body.tools ?? []).map((t) => (t as { function: { name: string } }).function.name).sort();

describe("env config: toolsets, distributions, validation, policy choice", () => {
  it("offers the enabled toolsets minus the disabled ones, the same tools to every trajectory of a group", async () => {
    llm = await startLlmServer({ respond: () => ({ text: "no tools needed" }) });
    const env = new WriteFileEnv({ groupSize: 3, tools: { enabled: ["default", "stateful"], disabled: ["filesystem"] }, model: { url: llm.url, name: "m" } }, { backend: fakeBackend(), logger: silentLogger() });
    await env.start();
    await env.collectTrajectories(env.getNextItem());
    await env.close();
    expect(llm.requests).toHaveLength(3);
    for (const r of llm.requests) expect(toolNames(r)).toEqual(["bash", "bash_stateful", "tmux"]);
  });

  it("samples a distribution once per group", async () => {
    llm = await startLlmServer({ respond: () => ({ text: "ok" }) });
    const env = new WriteFileEnv({ groupSize: 4, tools: { distribution: "terminal_tasks" }, model: { url: llm.url, name: "m" } }, { backend: fakeBackend(), logger: silentLogger() });
    await env.start();
    for (let g = 0; g < 5; g++) {
      llm.requests.length = 0;
      const outcome = await env.collectTrajectories(env.getNextItem());
      const sets = new Set(llm.requests.map((r) => toolNames(r).join(",")));
      expect(sets.size).toBe(1);
      expect([...sets][0]).toContain("bash");
      expect(outcome.toolsets).toContain("terminal");
    }
    await env.close();
  });

  it("rejects bad config with every offending field named, and says how to get a policy", async () => {
    expect(() => new WriteFileEnv({ groupSize: 0, model: { url: "ftp://x" }, pool: { provisioner: "k8s" } }, { logger: silentLogger() })).toThrow(EnvConfigError);
    try {
      new WriteFileEnv({ groupSize: 0, model: { url: "ftp://x" }, pool: { provisioner: "k8s" } }, { logger: silentLogger() });
    } catch (err) {
      expect((err as Error).message).toMatch(/write-file-test.*groupSize.*model\.url.*pool\.provisioner/s);
    }
    // A flat config from before the sections: each old key names its new place, nothing is silently dropped.
    expect(() => new WriteFileEnv({ modelUrl: "http://127.0.0.1:9/v1", toolTimeoutS: 3, nomadDriver: "docker" }, { logger: silentLogger() })).toThrow(
      "modelUrl moved to model.url; toolTimeoutS moved to executor.defaultTimeoutS; nomadDriver moved to pool.nomad.driver",
    );
    const env = new WriteFileEnv({ model: { url: "http://127.0.0.1:9/v1" } }, { backend: fakeBackend(), logger: silentLogger() });
    await env.start();
    expect(() => env.policyFor(env.getNextItem())).toThrow(NoPolicyError);
    await env.close();
  });

  it("a model server that fails on turn 1 is an infra failure: no score, the group dropped after its retries, not a crash", async () => {
    llm = await startLlmServer({ respond: () => ({ status: 400, body: "bad request" }) });
    const backend = fakeBackend();
    const env = new WriteFileEnv({ groupSize: 2, model: { url: llm.url, name: "m" }, infraRetries: 1 }, { backend, logger: silentLogger() });
    await env.start();
    const outcome = await env.collectTrajectories(env.getNextItem());
    await env.close();
    expect(outcome.ok).toBe(false);
    if (outcome.ok) return;
    expect(outcome.kind).toBe("infra");
    expect(outcome.trajectories).toEqual([]); // nothing scored
    expect(outcome.infraFailures.map((f) => f.cause)).toEqual(["model", "model", "model", "model"]); // 2 tries of 2
    expect(outcome.reason).toMatch(/infrastructure failure: model: the model server failed on turn 1: .*400/);
    expect(env.rewardOutputs).toEqual([]); // computeReward never ran
    expect(backend.executor.released).toHaveLength(4); // slots released all the same
  });
});
