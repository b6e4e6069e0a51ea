import { spawn, spawnSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, describe, expect, it } from "vitest";
import { exposureProblem, isLoopbackHost } from "../../src/http/exposure.js";

const cli = fileURLToPath(new URL("../../dist/src/cli/main.js", import.meta.url));
const scratch = mkdtempSync(join(tmpdir(), "slotpool-exposure-"));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

describe("no server listens beyond loopback without a token", () => {
  it("knows loopback addresses from the rest", () => {
    for (const h of ["127.0.0.1", "127.3.2.1", "localhost", "::1", "[::1]", "::ffff:127.0.0.1"]) expect(isLoopbackHost(h), h).toBe(true);
    for (const h of ["0.0.0.0", "::", "10.0.0.5", "192.168.1.2", "example.internal", "128.0.0.1"]) expect(isLoopbackHost(h), h).toBe(false);
    expect(exposureProblem("0.0.0.0", undefined, "--token T")).toMatch(/--host 0\.0\.0\.0 listens beyond loopback, so it needs a token: give --token T/);
    expect(exposureProblem("0.0.0.0", "s3cret", "--token T")).toBeUndefined();
    expect(exposureProblem("127.0.0.1", undefined, "--token T")).toBeUndefined();
  });

  const env: NodeJS.ProcessEnv = { ...process.env };
  for (const k of ["SANDBOX_TOKEN", "TOOL_EXECUTOR_TOKEN", "TOOL_SERVER_TOKEN"]) delete env[k];
  const tools = join(scratch, "tools.mjs");
  writeFileSync(tools, "export default [];\n");

  it.each([
    ["sandbox-server", ["--slots", "1", "--data-dir", join(scratch, "d")], "SANDBOX_TOKEN"],
    ["executor-server", [], "TOOL_EXECUTOR_TOKEN"],
    ["tool-server", ["--tools", tools], "TOOL_SERVER_TOKEN"],
  ])("%s --host 0.0.0.0 without a token exits 2 before listening, naming the fix", (command, extra, variable) => {
    const r = spawnSync(process.execPath, [cli, command, "--host", "0.0.0.0", "--port", "0", ...extra], { encoding: "utf8", timeout: 30_000, env });
    expect(r.status).toBe(2);
    expect(r.stderr).toContain("--host 0.0.0.0 listens beyond loopback, so it needs a token");
    expect(r.stderr).toContain(variable);
    expect(r.stdout + r.stderr).not.toMatch(/"listening"/);
  });

  it("a token given in the environment lets a server listen beyond loopback, and it asks for it", async () => {
    const child = spawn(process.execPath, [cli, "tool-server", "--host", "0.0.0.0", "--port", "0", "--tools", tools], { env: { ...env, TOOL_SERVER_TOKEN: "t0ken-for-test" }, stdio: ["ignore", "pipe", "pipe"] });
    try {
      const url = await new Promise<string>((resolve, reject) => {
        let out = "";
        const timer = setTimeout(() => reject(new Error(`no listening line: ${out}`)), 20_000);
        const onData = (b: Buffer) => {
          out += b.toString();
          const m = /"url":"(http:\/\/[^"]+)"/.exec(out);
          if (m) { clearTimeout(timer); resolve(m[1]!); }
        };
        child.stdout.on("data", onData);
        child.stderr.on("data", onData);
        child.once("exit", (code) => reject(new Error(`exited ${code}: ${out}`)));
      });
      const port = new URL(url).port;
      expect((await fetch(`http://127.0.0.1:${port}/tools`)).status).toBe(401);
      expect((await fetch(`http://127.0.0.1:${port}/tools`, { headers: { authorization: "Bearer t0ken-for-test" } })).status).toBe(200);
    } finally {
      child.kill("SIGTERM");
    }
  });
});
