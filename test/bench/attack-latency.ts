/**
 * Bystander latency during attacks, standalone: `npx tsx test/bench/attack-latency.ts [--rounds N]`
 * (run `npm run build` first). Starts a real sandbox server with the attack suite's limits,
 * runs each resource attack of `test/security/attacks.ts` in slot_0 while slot_2 runs
 * `bash true` back to back, checks containment, and prints a table of the bystander's
 * p50/p99 per attack (and the quiet baseline).
 */
import { parseArgs } from "node:util";
import { RESOURCE_ATTACKS } from "../security/attacks.js";
import { baselineLatency, bystanderLatency, startAttackServer, type LatencyStats } from "../security/support.js";

const { values } = parseArgs({ options: { rounds: { type: "string", default: "1" } } });
const rounds = Math.max(1, Number(values.rounds));

const server = await startAttackServer({ slots: 3 });
try {
  const health = await server.health();
  if (!health.json?.bwrap_available) throw new Error(`server is not sandboxed: ${health.text}`);
  await server.bash(0, "true");
  await server.bash(2, "true");
  const rows: Array<{ attack: string; contained: string; attack_ms: number } & LatencyStats> = [];
  rows.push({ attack: "(baseline, no attack)", contained: "-", attack_ms: 0, ...(await baselineLatency(server, 2, 100)) });
  for (const attack of RESOURCE_ATTACKS) {
    const samples: LatencyStats[] = [];
    let contained = "yes";
    let ms = 0;
    for (let r = 0; r < rounds; r++) {
      const { result, stats } = await bystanderLatency(server, 2, attack.run(server, 0));
      ms = Math.max(ms, result.ms);
      samples.push(stats);
      try {
        await attack.verify(result, server, 0);
      } catch (err) {
        contained = `NO: ${err instanceof Error ? err.message.slice(0, 80) : String(err)}`;
      }
      await server.reset(0);
    }
    // Worst round per figure: the report is about the tail.
    const worst = samples.reduce((a, b) => (b.p99 > a.p99 ? b : a));
    rows.push({ attack: attack.name, contained, attack_ms: ms, ...worst, n: samples.reduce((s, x) => s + x.n, 0), failures: samples.reduce((s, x) => s + x.failures, 0) });
  }
  console.log(`bystander slot 'bash true' latency (ms) while slot_0 is attacked (${rounds} round(s), worst p99 shown)`);
  console.table(rows);
} finally {
  await server.stop();
}
