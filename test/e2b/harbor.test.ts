import { spawn } from "node:child_process";
import { cpSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { imagesMissing } from "../support/image-server.js";
import { pythonClients } from "../support/python-clients.js";
import { pushImage, startRegistry, type TestRegistry } from "../support/registry.js";
import { debianPythonImage } from "../support/test-images.js";
import { startE2b, type E2bHarness } from "./helpers.js";

/**
 * Harbor (`pip install "harbor[e2b]"`, .build/python-harbor from test/python/requirements-harbor.txt)
 * runs Harbor-format tasks with its `oracle` agent and `-e e2b` pointed at slotpool's E2B
 * server, unchanged: Harbor builds each task's environment/Dockerfile as an E2B template
 * (`AsyncTemplate.build_in_background` of `Template().from_dockerfile(...)`, polled, then
 * `AsyncSandbox.create("name:build")`), uploads the solution and tests, runs them as root, and
 * reads /logs/verifier/reward.txt back. The tasks' base image is Debian with python3, built from
 * local files into a registry on loopback (fixtures/harbor-tasks/README.md says what differs from
 * Harbor's own hello-world). Nothing leaves the machine: HARBOR_TELEMETRY=0 and LiteLLM's local
 * cost map.
 */
const harbor = pythonClients("python-harbor");
const base = imagesMissing === undefined ? debianPythonImage() : { reason: imagesMissing };
const missing = harbor.reason ?? ("reason" in base ? base.reason : undefined);
const fixtures = resolve(import.meta.dirname, "fixtures", "harbor-tasks");

describe.skipIf(missing !== undefined)(`Harbor's oracle agent on slotpool's E2B server${missing ? ` (skipped: ${missing})` : ""}`, () => {
  let registry: TestRegistry;
  let h: E2bHarness;
  let work = "";

  beforeAll(async () => {
    registry = await startRegistry();
    const ref = await pushImage((base as { layout: string }).layout, registry.host, "harbor/debian-python:12");
    h = await startE2b({ slots: 3, sandboxServerArgs: ["--insecure-registry", registry.host] });
    work = mkdtempSync(join(tmpdir(), "slotpool-harbor-"));
    cpSync(fixtures, join(work, "tasks"), { recursive: true });
    rmSync(join(work, "tasks", "README.md"));
    for (const task of readdirSync(join(work, "tasks"))) {
      const dockerfile = join(work, "tasks", task, "environment", "Dockerfile");
      writeFileSync(dockerfile, readFileSync(dockerfile, "utf8").replace("{{BASE_IMAGE}}", ref));
    }
  }, 600_000);
  afterAll(async () => {
    await h?.stop();
    await registry?.stop();
    if (work) rmSync(work, { recursive: true, force: true });
  });

  /** `harbor run -p TASKS -a oracle -e e2b`: its exit code, output, and each trial's reward. */
  function harborRun(tasks: string, jobs: string): Promise<{ code: number | null; output: string; rewards: Record<string, unknown> }> {
    const env = { ...process.env, E2B_API_URL: h.url, E2B_SANDBOX_URL: h.url, E2B_API_KEY: h.apiKey, HARBOR_TELEMETRY: "0", LITELLM_LOCAL_MODEL_COST_MAP: "True" };
    const bin = join(harbor.python!, "..", "harbor");
    return new Promise((done) => {
      const p = spawn(bin, ["run", "-p", tasks, "-a", "oracle", "-e", "e2b", "-o", jobs, "--job-name", "job", "-n", "2", "-y", "-q"], { env, cwd: work });
      let output = "";
      p.stdout.on("data", (d: Buffer) => (output += d.toString()));
      p.stderr.on("data", (d: Buffer) => (output += d.toString()));
      p.once("close", (code) => {
        const rewards: Record<string, unknown> = {};
        for (const trial of readdirSync(join(jobs, "job"), { withFileTypes: true }).filter((e) => e.isDirectory())) {
          const result = JSON.parse(readFileSync(join(jobs, "job", trial.name, "result.json"), "utf8")) as { task_name?: string; verifier_result?: { rewards?: { reward?: unknown } }; exception_info?: unknown };
          rewards[result.task_name ?? trial.name] = result.verifier_result?.rewards?.reward ?? result.exception_info;
        }
        done({ code, output, rewards });
      });
    });
  }

  it("its hello-world task and a task writing /app, /etc and /var/log as root with the image's own Python: reward 1 on each", async () => {
    const r = await harborRun(join(work, "tasks"), join(work, "jobs"));
    expect(r.code, r.output).toBe(0);
    expect(r.rewards, r.output).toEqual({ "hello-world": 1, "root-writes": 1 });
    // Harbor built each task's Dockerfile through the template build API.
    expect(r.output).toMatch(/E2B template build started: harbor-/);
  }, 900_000);
});
