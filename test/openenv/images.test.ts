/**
 * OpenEnv episodes of an env whose items name task images (examples/image-tasks): a reset
 * puts the episode's slot in the item's image (through the env's workspaceTemplate), its tool
 * calls run there (the image's own python3, BusyBox and a root-only /solution), and the reward
 * is computed in that slot. A registry on loopback holds images built here.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import ImageTasksEnv from "../../examples/image-tasks/env.js";
import type { ToolBackend } from "../../src/env/backend.js";
import { AgentEnvConfigSchema } from "../../src/env/config.js";
import { poolBackend } from "../../src/env/pool-backend.js";
import { silentLogger } from "../../src/observability/logger.js";
import { OpenEnvServer } from "../../src/openenv/server.js";
import { imagesMissing } from "../support/image-server.js";
import { pushImage, startRegistry, type TestRegistry } from "../support/registry.js";
import { busyboxImage, debianPythonImage } from "../support/test-images.js";
import { startLlmServer, turnOf, type LlmServer } from "../support/llm-server.js";
import { freePort, WsClient } from "./support.js";

const python = imagesMissing ? undefined : debianPythonImage();
const skip = imagesMissing ?? (python && "reason" in python ? python.reason : undefined);

describe.skipIf(skip !== undefined)(`OpenEnv episodes in task images${skip ? ` (skipped: ${skip})` : ""}`, () => {
  let registry: TestRegistry;
  let backend: ToolBackend;
  let env: ImageTasksEnv;
  let server: OpenEnvServer;
  let wsUrl: string;
  let url: string;
  let llmPort: number;
  let llm: LlmServer | undefined;

  beforeAll(async () => {
    registry = await startRegistry();
    const pythonImage = await pushImage((python as { layout: string }).layout, registry.host, "openenv/python:1");
    const busybox = await pushImage(busyboxImage(), registry.host, "openenv/busybox:1");
    const log = silentLogger();
    // The env config's images section: every server the pool starts may read the loopback registry.
    const config = { pool: { slotsPerContainer: 2, minContainers: 1, maxContainers: 1 }, images: { insecureRegistries: [registry.host] } };
    backend = await poolBackend(AgentEnvConfigSchema.parse(config), undefined, log);
    env = new ImageTasksEnv({ ...config, pythonImage, busyboxImage: busybox }, { backend, logger: log });
    await env.start();
    llmPort = await freePort();
    // POST /run calls only the model endpoints the operator allowed: the scripted one below.
    server = new OpenEnvServer({ env, logger: log, limits: { modelUrlAllow: [`http://127.0.0.1:${llmPort}/v1`] } });
    url = await server.listen(0, "127.0.0.1");
    wsUrl = `${url.replace(/^http/, "ws")}/ws`;
  }, 600_000);
  afterAll(async () => {
    await llm?.close();
    await server?.close();
    await env?.close();
    await backend?.close();
    await registry?.stop();
  });

  it("reset puts the episode in the item's image; its calls use the image's tools; the reward is computed there", async () => {
    const c = await WsClient.connect(wsUrl);
    try {
      // Seed 0: a python item, straight from the Python image (its WorkingDir /testbed).
      const py = await c.reset({ seed: 0 });
      expect(py.type).toBe("observation");
      const ran = await c.call("bash", { command: "pwd; python3 -c 'print(6 * 7)'" });
      expect(ran.data.observation.result.data).toBe("/testbed\n42");
      await c.call("write_file", { path: "solution.py", content: "print(sum(int(l) for l in open('data.txt') if l.strip()))\n" });
      const done = await c.call("submit", { answer: "done" });
      expect(done.data).toEqual(expect.objectContaining({ done: true, reward: 1 }));

      // Seed 1: a busybox item, a template built on the BusyBox image (no python3 there).
      await c.reset({ seed: 1 });
      const bb = await c.call("bash", { command: "cat /opt/task/status HOWTO.txt; command -v python3 || echo no-python; mkdir -p /solution && wc -l < notes.txt > /solution/answer.txt" });
      expect(bb.data.observation.result.data).toBe("ready\nAnswers go to /solution/answer.txt.\nno-python");
      const solved = await c.call("submit", { answer: "done" });
      expect(solved.data.reward).toBe(1);
    } finally {
      await c.close();
    }
  }, 300_000);

  it("POST /run rolls out an item in its image on the trainer's model: the image's python3 runs the agent's program, reward 1", async () => {
    // Turn 1: the program and its run (a Python image item: seed 0); turn 2: done.
    llm = await startLlmServer({
      port: llmPort,
      respond: (body) =>
        turnOf(body) === 1
          ? { toolCalls: [{ name: "write_file", arguments: { path: "solution.py", content: "print(sum(int(l) for l in open('data.txt') if l.strip()))\n" } }, { name: "bash", arguments: { command: "pwd; python3 solution.py" } }] }
          : { text: "done" },
    });
    const res = await fetch(`${url}/run`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ seed: 0, model: { base_url: `http://127.0.0.1:${llmPort}/v1`, model: "scripted" } }) });
    const t = (await res.json()) as { status: string; reward: number; tool_calls: Array<{ tool: string; success: boolean }>; messages: Array<{ role: string; content: string | null }> };
    expect(res.status).toBe(200);
    expect(t).toEqual(expect.objectContaining({ status: "scored", reward: 1 }));
    expect(t.tool_calls.map((c) => [c.tool, c.success])).toEqual([["write_file", true], ["bash", true]]);
    // The bash call's answer: the image's WorkingDir, and the sum python3 printed (item 0: 7 + 10 + 13).
    const bash = t.messages.filter((m) => m.role === "tool").map((m) => JSON.parse(m.content ?? "{}") as { output?: string })[1];
    expect(bash?.output).toBe("/testbed\n30");
  }, 300_000);
});
