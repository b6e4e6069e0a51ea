/**
 * Issue 39, item 5: `slotpool openenv-server` says how it is doing — `GET /status` (behind the
 * token, as every route but /health) and, with `--metrics-port`, Prometheus series on loopback:
 * sessions, episodes by how they ended, the mean reward and the pool's slots.
 */
import { spawn } from "node:child_process";
import { describe, expect, it } from "vitest";
import { slotpoolCommand } from "../../src/pool/slotpool-command.js";
import { SOLVE_SEED_0, WRONG_SEED_0 } from "./support.js";

/** The server's listening line (JSON on stderr), once it is ready. */
function startServer(extra: string[]) {
  const { command, args } = slotpoolCommand();
  const child = spawn(command, [...args, "openenv-server", "examples/shell-tasks/env.js", "--port", "0", ...extra], { stdio: ["ignore", "pipe", "pipe"] });
  let logs = "";
  const exited = new Promise<number | null>((r) => child.once("exit", (code) => r(code)));
  const listening = new Promise<Record<string, string>>((resolve, reject) => {
    child.stderr.on("data", (d: Buffer) => {
      logs += d.toString();
      const line = logs.split("\n").find((l) => l.includes('"msg":"listening"'));
      if (line) resolve(JSON.parse(line) as Record<string, string>);
    });
    void exited.then((code) => reject(new Error(`exited ${code} before listening:\n${logs}`)));
  });
  return { child, exited, listening };
}

describe("slotpool openenv-server --metrics-port and GET /status", () => {
  it("after a solved and a wrong episode (rewards 1 and 0): /status and /metrics count them, with the mean reward and the slots", async () => {
    const srv = startServer(["--slots-per-container", "2", "--max-containers", "1", "--token", "sekrit", "--metrics-port", "0"]);
    try {
      const { url, metrics, status } = await srv.listening;
      expect(status).toBe(`${url}/status`);
      expect(metrics).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/metrics$/);
      const auth = { authorization: "Bearer sekrit", "content-type": "application/json" };
      const step = async (command: string) => {
        const res = await fetch(`${url}/step`, { method: "POST", headers: auth, body: JSON.stringify({ action: { type: "call_tool", tool_name: "bash", arguments: { command } }, seed: 0 }) });
        return ((await res.json()) as { reward: number }).reward;
      };
      expect(await step(SOLVE_SEED_0)).toBe(1);
      expect(await step(WRONG_SEED_0)).toBe(0);

      expect((await fetch(`${url}/status`)).status).toBe(401);
      const s = (await (await fetch(`${url}/status`, { headers: auth })).json()) as Record<string, any>;
      expect(s).toMatchObject({ env: "shell-tasks", sessions: 0, active_episodes: 0, episodes: { begun: 2, scored: 2, failed: 0, abandoned: 0 }, mean_reward: 0.5 });
      expect(s["pool"]["slots"]).toMatchObject({ total: 2, free: 2, held: 0 });

      const text = await (await fetch(metrics!)).text();
      expect(text).toMatch(/^slotpool_openenv_episodes\{outcome="scored"\} 2$/m);
      expect(text).toMatch(/^slotpool_openenv_mean_reward 0\.5$/m);
      expect(text).toMatch(/^slotpool_openenv_pool_slots\{state="free"\} 2$/m);
      expect(text).toMatch(/^slotpool_openenv_sessions 0$/m);
    } finally {
      srv.child.kill("SIGTERM");
    }
    expect(await srv.exited).toBe(0);
  }, 150_000);
});
