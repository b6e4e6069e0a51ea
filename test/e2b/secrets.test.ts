import { mkdtempSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Writable } from "node:stream";
import { Sandbox, SandboxError, Secret, SecretError, SecretNotFoundError } from "e2b";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { E2bServer } from "../../src/e2b/server.js";
import { createLogger } from "../../src/observability/logger.js";
import { startE2b, type E2bHarness } from "./helpers.js";

/**
 * E2B's `Secret` through the real JS SDK: named values kept by the E2B server, write-only
 * (no answer carries a value), that a sandbox gets as environment variables through
 * `Secret.fill(name)` in `Sandbox.create`'s envs; never in a log line, a command listing or
 * /health; kept in --secrets-file (mode 0600) to outlive the server.
 */

const VALUE = "sk-test-" + "9f3a1c".repeat(6);

describe("E2B secrets through the SDK", () => {
  let h: E2bHarness;
  let dir: string;
  const logs: string[] = [];
  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), "slotpool-secrets-"));
    const logger = createLogger({ name: "e2b-server", level: "debug", destination: new Writable({ write: (c, _e, cb) => (logs.push(String(c)), cb()) }) });
    h = await startE2b({ slots: 3, secretsFile: join(dir, "secrets.json"), logger });
  }, 120_000);
  afterAll(async () => {
    await h?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it("create, getInfo by id and by name, list with paging, exists, update (a new version), destroy: no answer carries the value", async () => {
    const info = await Secret.create("OpenAI-Key", VALUE, { ...h.opts, metadata: { env: "test" } });
    expect(info.secretId).toMatch(/^sec_/);
    expect(info).toMatchObject({ name: "openai-key", version: 1, metadata: { env: "test" } });
    expect(info).not.toHaveProperty("value");
    expect((await Secret.getInfo(info.secretId, h.opts)).name).toBe("openai-key");
    expect((await Secret.getInfo("openai-key", h.opts)).secretId).toBe(info.secretId);
    await expect(Secret.create("openai-key", "other", h.opts)).rejects.toBeInstanceOf(SecretError);
    await expect(Secret.create("sec_reserved", "x", h.opts)).rejects.toBeInstanceOf(SecretError);
    await Secret.create("b-key", "b", h.opts);
    await Secret.create("c-key", "c", h.opts);
    const pages = Secret.list({ ...h.opts, limit: 2 });
    expect(await pages.nextItems()).toHaveLength(2);
    expect(pages.hasNext).toBe(true);
    expect(await pages.nextItems()).toHaveLength(1);
    expect(pages.hasNext).toBe(false);
    expect(await Secret.exists("b-key", h.opts)).toBe(true);
    const updated = await Secret.update("b-key", "b2", h.opts);
    expect(updated.version).toBe(2);
    await expect(Secret.update("missing", "x", h.opts)).rejects.toBeInstanceOf(SecretNotFoundError);
    expect(await Secret.destroy("c-key", h.opts)).toBe(true);
    expect(await Secret.destroy("c-key", h.opts)).toBe(false);
    expect(await Secret.exists("c-key", h.opts)).toBe(false);
    const raw = await (await fetch(`${h.url}/secrets`, { headers: { "x-api-key": h.apiKey } })).text();
    expect(raw).not.toContain(VALUE);
    expect((await fetch(`${h.url}/secrets`)).status).toBe(401);
  });

  it("a sandbox gets a secret's value as an environment variable (Secret.fill); it is in no listing, log line or /health; an unknown secret is a 400 naming it", async () => {
    const sbx = await Sandbox.create({ ...h.opts, envs: { OPENAI_API_KEY: Secret.fill("openai-key"), AUTH: `Bearer ${Secret.fill("openai-key")}`, PLAIN: "x" } });
    try {
      expect((await sbx.commands.run("echo $OPENAI_API_KEY; echo $AUTH; echo $PLAIN")).stdout).toBe(`${VALUE}\nBearer ${VALUE}\nx\n`);
      const bg = await sbx.commands.run("sleep 60", { background: true });
      const listed = JSON.stringify(await sbx.commands.list());
      expect(listed).toContain("sleep");
      expect(listed).not.toContain(VALUE);
      await bg.kill();
      expect(JSON.stringify(await sbx.getInfo())).not.toContain(VALUE);
      expect(await (await fetch(`${h.url}/health`)).text()).not.toContain(VALUE);
      for (const c of h.pool.containerList()) expect(await (await fetch(`${c.url}/health`)).text()).not.toContain(VALUE);
    } finally {
      await sbx.kill();
    }
    await expect(Sandbox.create({ ...h.opts, envs: { K: Secret.fill("no-such-secret") } })).rejects.toThrow(/no secret named 'no-such-secret'/);
    await expect(Sandbox.create({ ...h.opts, envs: { K: Secret.fill("no-such-secret") } })).rejects.toBeInstanceOf(SandboxError);
    // A new value reaches sandboxes made after the update.
    await Secret.update("openai-key", "rotated-value", h.opts);
    const next = await Sandbox.create({ ...h.opts, envs: { K: Secret.fill("openai-key") } });
    expect((await next.commands.run("echo $K")).stdout).toBe("rotated-value\n");
    await next.kill();
    expect(logs.length).toBeGreaterThan(0);
    expect(logs.join("")).not.toContain(VALUE);
    expect(logs.join("")).not.toContain("rotated-value");
  }, 60_000);

  it("--secrets-file keeps them (mode 0600) for the next server", async () => {
    const file = join(dir, "secrets.json");
    expect(statSync(file).mode & 0o777).toBe(0o600);
    const again = new E2bServer({ pool: h.pool, apiKey: h.apiKey, secretsFile: file });
    const url = await again.listen(0, "127.0.0.1");
    try {
      expect((await Secret.getInfo("openai-key", { ...h.opts, apiUrl: url })).version).toBe(2);
    } finally {
      await again.close();
    }
  });
});
