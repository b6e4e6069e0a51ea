/**
 * OpenEnv server benchmark (issue 31).
 *
 *   npm run build && node --import tsx test/bench/openenv-bench.ts [--rounds 100] [--sessions 32] [--episodes 256] [--quick]
 *
 * examples/shell-tasks behind `OpenEnvServer` on 127.0.0.1, on a warm local pool (its
 * containers up, a few unmeasured rounds first), driven over WebSocket /ws as OpenEnv's
 * EnvClient does.
 *  1. reset → first call_tool result: one session, each round a reset (slot taken, reset into
 *     the item, setupWorkspace) then `bash echo hi`, timed from sending the reset until the
 *     tool's observation is back; then the episode is submitted (not timed). p50/p99.
 *  2. episodes per second at N concurrent sessions: N connections, each running episodes
 *     back to back (reset, one bash call that solves item 0, submit, scored by computeReward
 *     in the slot) until `--episodes` are done in all; every reward must be 1.
 * Figures depend on the machine's load.
 */
import ShellTasksEnv from "../../examples/shell-tasks/env.js";
import { AgentEnvConfigSchema } from "../../src/env/config.js";
import { poolBackend } from "../../src/env/pool-backend.js";
import { percentile } from "../../src/observability/latency-window.js";
import { silentLogger } from "../../src/observability/logger.js";
import { OpenEnvServer } from "../../src/openenv/server.js";
import { LocalProvisioner } from "../../src/pool/local-provisioner.js";
import { SOLVE_SEED_0, WsClient } from "../openenv/support.js";

const argv = process.argv.slice(2);
const quick = argv.includes("--quick");
const arg = (name: string, fallback: number) => {
  const i = argv.indexOf(name);
  return i >= 0 ? Number(argv[i + 1]) : fallback;
};
const ROUNDS = arg("--rounds", quick ? 30 : 100);
const SESSIONS = arg("--sessions", 32);
const EPISODES = arg("--episodes", quick ? 64 : 256);

const fmt = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return `p50 ${percentile(s, 0.5).toFixed(1)} ms  p99 ${percentile(s, 0.99).toFixed(1)} ms  (n=${xs.length})`;
};

async function main(): Promise<void> {
  const log = silentLogger();
  const provisioner = new LocalProvisioner({ slotsPerContainer: SESSIONS });
  const backend = await poolBackend(AgentEnvConfigSchema.parse({ pool: { slotsPerContainer: SESSIONS, minContainers: 1, maxContainers: 1, acquireTimeoutMs: 120_000 } }), provisioner, log);
  const env = new ShellTasksEnv({}, { backend, logger: log });
  await env.start();
  const server = new OpenEnvServer({ env, logger: log });
  const url = await server.listen(0, "127.0.0.1");
  const wsUrl = `${url.replace(/^http/, "ws")}/ws`;
  try {
    const firstCall: number[] = [];
    const c = await WsClient.connect(wsUrl);
    for (let round = -5; round < ROUNDS; round++) {
      const t0 = performance.now();
      const reset = await c.reset({ seed: 0 });
      const ran = await c.call("bash", { command: "echo hi" });
      const t1 = performance.now();
      if (reset.type !== "observation" || ran.data.observation?.result?.data !== "hi") throw new Error(`unexpected frames ${JSON.stringify([reset, ran]).slice(0, 300)}`);
      await c.call("submit");
      if (round >= 0) firstCall.push(t1 - t0);
    }
    await c.close();
    console.log(`reset → first call_tool result (warm pool, 1 session): ${fmt(firstCall)}`);

    const clients = await Promise.all(Array.from({ length: SESSIONS }, () => WsClient.connect(wsUrl)));
    let started = 0;
    let wrong = 0;
    const t0 = performance.now();
    await Promise.all(
      clients.map(async (cl) => {
        while (started < EPISODES) {
          started++;
          await cl.reset({ seed: 0 });
          await cl.call("bash", { command: SOLVE_SEED_0 });
          const end = await cl.call("submit");
          if (end.data.reward !== 1) wrong++;
        }
      }),
    );
    const seconds = (performance.now() - t0) / 1000;
    await Promise.all(clients.map((cl) => cl.close()));
    if (wrong > 0) throw new Error(`${wrong} episodes were not rewarded 1`);
    console.log(`episodes per second at ${SESSIONS} concurrent sessions: ${(started / seconds).toFixed(1)} (${started} episodes in ${seconds.toFixed(1)} s, every reward 1)`);
  } finally {
    await server.close();
    await env.close();
    await backend.close();
  }
}

await main();
