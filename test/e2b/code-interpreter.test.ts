import { spawn } from "node:child_process";
import { cpSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { Sandbox as CodeInterpreter } from "@e2b/code-interpreter";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { codeInterpreterWheels } from "../support/code-interpreter-wheels.js";
import { imagesMissing } from "../support/image-server.js";
import { pythonClients } from "../support/python-clients.js";
import { pushImage, startRegistry, type TestRegistry } from "../support/registry.js";
import { debianCodeInterpreterBaseImage } from "../support/test-images.js";
import { startE2b, type E2bHarness } from "./helpers.js";

/**
 * E2B's code interpreter on slotpool: the `code-interpreter-v1` template is built from E2B's
 * own definition (github e2b-dev/code-interpreter, `template/`, copied in
 * fixtures/code-interpreter/template, ORIGIN.md there) through the template build API, by E2B's
 * Python SDK, as E2B's build_prod.py does; then both code interpreter SDKs (`e2b-code-interpreter`
 * for Python, `@e2b/code-interpreter` for JS) create a sandbox of it and run code: the SDK
 * reaches the template's server on port 49999 through the E2B server (`E2b-Sandbox-Port`), the
 * server runs it in a Jupyter kernel and asks envd's GET /envs inside the sandbox.
 *
 * Built from local parts (fixtures/code-interpreter/build_local.py says exactly what differs):
 * the definition's base image (Docker Hub's python:3.13), apt packages, nodesource and the
 * JavaScript kernel (from GitHub) need the internet. The base is Debian bookworm with python3,
 * venv, pip, curl and sudo from mmdebstrap, served by a registry on loopback; the Python
 * kernel only; pip installs from wheels downloaded on this host beforehand (the build reaches
 * no index); the start command runs as root (a slot's no_new_privs stops sudo from a user).
 */
const clients = pythonClients("python");
const fixture = resolve(import.meta.dirname, "fixtures", "code-interpreter");
const isRoot = process.getuid?.() === 0;
const base = !isRoot ? { reason: "not root" } : imagesMissing === undefined ? debianCodeInterpreterBaseImage() : { reason: imagesMissing };
const wheels = !isRoot ? { reason: "not root" } : clients.python ? codeInterpreterWheels(clients.python, [join(fixture, "template", "requirements.txt"), join(fixture, "template", "server", "requirements.txt")]) : { reason: clients.reason! };
// A server that is not root has one uid in an image root (docs/images.md), and the definition's
// `chown -R user:user /home/user` names uid 1000, which it cannot map (chown: Invalid argument).
const notRoot = !isRoot ? "not root: a non-root server's image roots have one uid, and E2B's definition chowns /home/user to its `user` (uid 1000)" : undefined;
const missing = notRoot ?? clients.reason ?? ("reason" in base ? base.reason : undefined) ?? ("reason" in wheels ? wheels.reason : undefined);

function run(cmd: string, args: string[], env: NodeJS.ProcessEnv): Promise<{ code: number | null; stdout: string; output: string }> {
  return new Promise((done) => {
    const p = spawn(cmd, args, { env });
    let stdout = "";
    let output = "";
    p.stdout.on("data", (d: Buffer) => ((stdout += d.toString()), (output += d.toString())));
    p.stderr.on("data", (d: Buffer) => (output += d.toString()));
    p.once("close", (code) => done({ code, stdout, output }));
  });
}

describe.skipIf(missing !== undefined)(`E2B's code interpreter template built and run on slotpool${missing ? ` (skipped: ${missing})` : ""}`, () => {
  let registry: TestRegistry;
  let h: E2bHarness;
  let work = "";
  let env: NodeJS.ProcessEnv = {};
  let build = { code: null as number | null, output: "" };

  beforeAll(async () => {
    registry = await startRegistry();
    const ref = await pushImage((base as { layout: string }).layout, registry.host, "e2b/code-interpreter-base:bookworm");
    h = await startE2b({ slots: 3, sandboxServerArgs: ["--insecure-registry", registry.host] });
    work = mkdtempSync(join(tmpdir(), "slotpool-code-interpreter-"));
    cpSync(fixture, work, { recursive: true });
    cpSync((wheels as { dir: string }).dir, join(work, "template", "wheels"), { recursive: true });
    env = { ...process.env, E2B_API_URL: h.url, E2B_SANDBOX_URL: h.url, E2B_API_KEY: h.apiKey };
    build = await run(clients.python!, [join(work, "build_local.py"), ref, "code-interpreter-v1"], env);
  }, 900_000);
  afterAll(async () => {
    await h?.stop();
    await registry?.stop();
    if (work) rmSync(work, { recursive: true, force: true });
  });

  it("E2B's template definition builds through the template API as code-interpreter-v1 (Python kernel, from local parts)", () => {
    expect(build.code, build.output).toBe(0);
    expect(build.output).toMatch(/Build finished in [\d.]+ s/);
    expect(build.output).toMatch(/built template tpl\w+ build /);
  });

  // The SDKs' request timeouts are raised to 600 s: a create answers once the template's start
  // command (Jupyter Server, a kernel, the FastAPI server) is ready, 4–6 s here at a load of 9,
  // and the SDKs' defaults (60 s) are too close on a box loaded by the whole suite.
  it("e2b-code-interpreter (Python): Sandbox.create() and run_code('1+1') give 2; print, an exception and the create's envs reach the SDK", async () => {
    const script = `
import json
from e2b_code_interpreter import Sandbox
s = Sandbox.create(envs={"FROM_CREATE": "py"}, request_timeout=600)
try:
    one = s.run_code("1+1")
    out = s.run_code("print('hello')")
    err = s.run_code("1/0")
    env = s.run_code("import os; os.environ['FROM_CREATE']")
    print(json.dumps({"text": one.text, "stdout": out.logs.stdout, "error": err.error.name if err.error else None, "env": env.text}))
finally:
    s.kill()
`;
    const r = await run(clients.python!, ["-c", script], env);
    expect(r.code, r.output).toBe(0);
    expect(JSON.parse(r.stdout.trim().split("\n").pop()!)).toEqual({ text: "2", stdout: ["hello\n"], error: "ZeroDivisionError", env: "py" });
  }, 900_000);

  it("@e2b/code-interpreter (JS): runCode('1+1') gives 2; envd's GET /envs answers inside the sandbox with the create's envs", async () => {
    const sbx = await CodeInterpreter.create({ ...h.opts, envs: { FROM_CREATE: "js" }, requestTimeoutMs: 600_000 });
    try {
      const one = await sbx.runCode("1+1");
      expect(one.error).toBeUndefined();
      expect(one.text).toBe("2");
      const out = await sbx.runCode("print('hello')");
      expect(out.logs.stdout).toEqual(["hello\n"]);
      // What the template's server asks before its first execution (template/server/envs.py).
      const envd = await sbx.commands.run("curl -s http://localhost:49983/envs");
      expect(JSON.parse(envd.stdout)).toEqual({ FROM_CREATE: "js" });
    } finally {
      await sbx.kill();
    }
  }, 900_000);
});
