/**
 * Isolation arguments (`allow_network`, `require_sandbox`, `require_stateful_sandbox`) belong to
 * the env's config, never to the model: through the executor service started with
 * `--no-network`, a tool call whose arguments ask for network still gets none.
 */
import { chmodSync, mkdtempSync, rmSync } from "node:fs";
import { createServer, type Server } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startCliServer, type CliServer } from "./support.js";

const TOKEN = "policy-args-token-0c1d";
let exec: CliServer;
let base: string;
let listener: Server;
let port = 0;
let accepted = 0;

beforeAll(async () => {
  listener = createServer((s) => {
    accepted++;
    s.end("hello-from-host\n");
  });
  await new Promise<void>((r) => listener.listen(0, "127.0.0.1", () => r()));
  port = (listener.address() as { port: number }).port;
  base = mkdtempSync(join(tmpdir(), "slotpool-policy-"));
  chmodSync(base, 0o755);
  exec = await startCliServer(["executor-server", "--port", "0", "--token", TOKEN, "--provisioner", "local", "--slots-per-container", "2", "--min-containers", "1", "--max-containers", "1", "--data-dir", join(base, "data"), "--no-network", "--require-sandbox"], { startTimeoutMs: 60_000 });
}, 90_000);
afterAll(async () => {
  await exec?.stop(15_000);
  if (base) rmSync(base, { recursive: true, force: true });
  await new Promise<void>((r) => listener.close(() => r()));
});

async function call(trajectoryId: string, name: string, args: Record<string, unknown>) {
  const res = await fetch(`${exec.url}/execute`, {
    method: "POST",
    headers: { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" },
    body: JSON.stringify({ trajectory_id: trajectoryId, tool: { name, arguments: args } }),
  });
  return (await res.json()) as { success: boolean; output: string; error: string; metadata: Record<string, unknown> };
}

describe("isolation arguments from the model are ignored", () => {
  it("bash / terminal / bash_stateful asking for allow_network: true still have no network (env says --no-network)", async () => {
    const connect = `(exec 3<>/dev/tcp/127.0.0.1/${port} && head -1 <&3) 2>&1; echo rc=$?`;
    for (const [name, args] of [
      ["bash", { command: connect, allow_network: true, require_sandbox: false }],
      ["terminal", { command: connect, allow_network: true }],
      ["bash_stateful", { command: connect, allow_network: true, require_stateful_sandbox: false }],
    ] as const) {
      const r = await call(`policy-${name}`, name, args);
      expect(r.output, `${name}: ${JSON.stringify(r)}`).not.toContain("hello-from-host");
      expect(r.output, `${name}: ${JSON.stringify(r).slice(0, 400)}`).toMatch(/rc=[1-9]/);
      if (name !== "bash_stateful") expect(r.metadata["network_isolated"]).toBe(true);
      expect(r.metadata["sandboxed"]).toBe(true);
      await fetch(`${exec.url}/release`, { method: "POST", headers: { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" }, body: JSON.stringify({ trajectory_id: `policy-${name}`, reset_workspace: true }) });
    }
    expect(accepted).toBe(0);
  }, 60_000);
});
