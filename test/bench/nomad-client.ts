/**
 * Nomad client and emulator figures: `npx tsx test/bench/nomad-client.ts [--containers N]`
 * (run `npm run build` first: allocations are real sandbox servers).
 *
 * Prints: exact-JSON parse cost vs. plain JSON.parse on a large allocation list; the
 * client's round trip for a read against the emulator; register → N running containers;
 * and how fast a killed container is noticed through a blocking query and through the
 * event stream.
 */
import { performance } from "node:perf_hooks";
import { parseArgs } from "node:util";
import { NomadClient } from "../../src/nomad/client.js";
import { parseNomadJson } from "../../src/nomad/json.js";
import { sandboxJob } from "../../src/nomad/job.js";
import { AllocListSchema } from "../../src/nomad/schemas.js";
import { startNomadEmulator } from "../support/nomad-emulator.js";
import { fixtureText } from "../nomad/nomad-api-fixtures.js";

const { values } = parseArgs({ options: { containers: { type: "string", default: "4" } } });
const containers = Math.max(1, Number(values.containers));

function stats(samples: number[]): string {
  const s = [...samples].sort((a, b) => a - b);
  const pick = (q: number) => s[Math.min(s.length - 1, Math.floor(q * s.length))]!.toFixed(2);
  return `p50 ${pick(0.5)} ms, p99 ${pick(0.99)} ms (n=${s.length})`;
}

// 1. Exact JSON: 1000 allocation stubs with nanosecond timestamps.
const one = (JSON.parse(fixtureText("allocations-list.response.json")) as unknown[])[0];
const bigList = `[${Array.from({ length: 1000 }, () => JSON.stringify(one).replace(/"CreateTime":\d+/, '"CreateTime":1636017249798459123')).join(",")}]`;
const plain: number[] = [];
const exact: number[] = [];
const validated: number[] = [];
for (let i = 0; i < 30; i++) {
  let t = performance.now();
  JSON.parse(bigList);
  plain.push(performance.now() - t);
  t = performance.now();
  const raw = parseNomadJson(bigList);
  exact.push(performance.now() - t);
  t = performance.now();
  AllocListSchema.parse(raw);
  validated.push(performance.now() - t);
}
console.log(`1000 allocation stubs (${(bigList.length / 1024).toFixed(0)} KiB): JSON.parse ${stats(plain)}`);
console.log(`  parseNomadJson (exact nanoseconds): ${stats(exact)}`);
console.log(`  + zod AllocListSchema: ${stats(validated)}`);

const nomad = await startNomadEmulator({ rescheduleDelayMs: -1 });
const client = new NomadClient({ address: nomad.address });
try {
  // 2. Round trip of a read.
  await client.registerJob(sandboxJob({ jobId: "bench-empty", count: 0 }));
  const reads: number[] = [];
  for (let i = 0; i < 300; i++) {
    const t = performance.now();
    await client.readJob("bench-empty");
    reads.push(performance.now() - t);
  }
  console.log(`readJob round trip against the emulator: ${stats(reads.slice(20))}`);

  // 3. Register → N running real sandbox servers.
  let t = performance.now();
  await client.registerJob(sandboxJob({ jobId: "bench", count: containers, slots: 2 }));
  await nomad.waitForAllocations("bench", (a) => a.filter((x) => x["ClientStatus"] === "running").length === containers, 60_000);
  console.log(`register → ${containers} running sandbox servers: ${(performance.now() - t).toFixed(0)} ms`);

  // 4. Kill detection latency, blocking query vs. event stream (5 rounds each, one at a time).
  const viaQuery: number[] = [];
  const viaStream: number[] = [];
  const victims = nomad.allocations("bench").filter((a) => a["ClientStatus"] === "running").map((a) => String(a["ID"]));
  for (const [round, id] of victims.entries()) {
    const { index } = await client.jobAllocations("bench");
    const ac = new AbortController();
    const stream = (async () => {
      for await (const e of client.eventStream({ topics: { Allocation: ["bench"] }, index, signal: ac.signal })) {
        if (e.Payload?.Allocation?.ID === id && e.Payload.Allocation.ClientStatus === "failed") return performance.now();
      }
      return NaN;
    })().catch(() => NaN);
    await new Promise((r) => setTimeout(r, 50));
    t = performance.now();
    const query = (async () => {
      let cursor = index;
      for (;;) {
        const res = await client.jobAllocations("bench", { index: cursor, waitMs: 10_000 });
        cursor = res.index;
        if (res.allocations.some((a) => a.ID === id && a.ClientStatus === "failed")) return performance.now();
      }
    })();
    await nomad.killAllocation(id);
    viaQuery.push((await query) - t);
    viaStream.push((await stream) - t);
    ac.abort();
    if (round >= 4) break;
  }
  console.log(`killed container noticed via blocking query: ${stats(viaQuery)}`);
  console.log(`killed container noticed via event stream:   ${stats(viaStream)}`);
} finally {
  await client.close();
  await nomad.stop();
}
