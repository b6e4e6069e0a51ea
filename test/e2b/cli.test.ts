import { spawn } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Sandbox } from "e2b";
import { describe, expect, it } from "vitest";
import { slotpoolCommand } from "../../src/pool/slotpool-command.js";
import { startServerCli } from "../support/server-cli.js";

/** `slotpool e2b-server` as a user runs it: the SDK against the CLI, then SIGTERM ends every sandbox. */
function startCli(extra: string[], env: NodeJS.ProcessEnv = {}) {
  return startServerCli("e2b-server", ["--port", "0", ...extra], env);
}

describe("slotpool e2b-server (CLI, local provisioner)", () => {
  it("serves the SDK with templates from --templates; SIGTERM ends every sandbox, its processes included", async () => {
    const dir = mkdtempSync(join(tmpdir(), "slotpool-e2bcli-"));
    const templates = join(dir, "templates.json");
    writeFileSync(templates, JSON.stringify([{ name: "hello", setup: ["echo from-template > hello.txt"] }]));
    const marker = `${600 + Math.floor(Math.random() * 1000)}.25`;
    const srv = startCli(["--provisioner", "local", "--slots-per-container", "2", "--min-containers", "1", "--max-containers", "1", "--templates", templates], { E2B_API_KEY: "cli-key" });
    try {
      const url = await srv.url;
      const opts = { apiUrl: url, sandboxUrl: url, apiKey: "cli-key" };
      const s = await Sandbox.create("hello", opts);
      expect(await s.files.read("hello.txt")).toBe("from-template\n");
      await s.commands.run(`sleep ${marker}`, { background: true, timeoutMs: 0 });
      const running = () => new Promise<string>((r) => spawn("pgrep", ["-f", `sleep ${marker}`]).stdout.on("data", (d: Buffer) => r(d.toString())).once("close", () => r("")));
      expect(await running()).not.toBe("");
      srv.child.kill("SIGTERM");
      expect(await srv.exited).toBe(0);
      expect(srv.state.logs).toMatch(/"why":"shutdown".*"msg":"sandbox ended"|"msg":"sandbox ended".*"why":"shutdown"/);
      expect(srv.state.logs).toContain('"msg":"stopped"');
      expect(await running()).toBe("");
    } finally {
      if (srv.child.exitCode === null) srv.child.kill("SIGKILL");
      rmSync(dir, { recursive: true, force: true });
    }
  }, 120_000);

  it("refuses to start without an API key, and names a bad templates file", async () => {
    const env = { ...process.env };
    delete env["E2B_API_KEY"];
    const { command, args } = slotpoolCommand();
    const run = (extra: string[]) =>
      new Promise<{ code: number | null; err: string }>((resolve) => {
        const c = spawn(command, [...args, "e2b-server", ...extra], { env, stdio: ["ignore", "pipe", "pipe"] });
        let err = "";
        c.stderr.on("data", (d: Buffer) => (err += d.toString()));
        c.once("exit", (code) => resolve({ code, err }));
      });
    const noKey = await run([]);
    expect(noKey.code).toBe(2);
    expect(noKey.err).toContain("--api-key KEY (or E2B_API_KEY) is required");
    const dir = mkdtempSync(join(tmpdir(), "slotpool-e2bcli-"));
    try {
      writeFileSync(join(dir, "t.json"), JSON.stringify([{ name: "bad name!", setup: [] }]));
      const bad = await run(["--api-key", "k", "--templates", join(dir, "t.json")]);
      expect(bad.code).toBe(2);
      expect(bad.err).toMatch(/--templates .*t\.json: 0\.name: template names are/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
