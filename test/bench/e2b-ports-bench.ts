/**
 * Port traffic to a sandbox (issue 37): the cost of reaching a server a sandbox's command
 * started, through the E2B server and its slot's port tunnel.
 *
 *   npm run build && node --import tsx test/bench/e2b-ports-bench.ts [--rounds 200] [--quick]
 *
 * A local pool of real sandbox servers behind `E2bServer` on 127.0.0.1, the real `e2b` SDK. In
 * one sandbox a small Python HTTP/WebSocket server (test/e2b/fixtures/port-server.py) listens
 * on port 8000. Measured in one run, round after round:
 *   - a GET through `getHost(8000)` on a fresh connection (what `fetch` of E2B code does: each
 *     request opens a tunnel, i.e. one relay process in the slot's namespace);
 *   - the same GET through the E2b-Sandbox-Id/E2b-Sandbox-Port headers;
 *   - the same GET straight to the server inside the slot, from a command in the sandbox
 *     (curl to 127.0.0.1:8000: the floor, no tunnel);
 *   - a WebSocket message's round trip on one open connection (the tunnel already made);
 *   - a 16 MB download through getHost, MB/s.
 * Figures depend on the machine's load: run on a quiet machine for absolute numbers.
 */
import { readFileSync, chmodSync, mkdtempSync, rmSync } from "node:fs";
import { request } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { LookupFunction } from "node:net";
import { Sandbox } from "e2b";
import { WebSocket } from "ws";
import { E2bServer } from "../../src/e2b/server.js";
import { LocalProvisioner } from "../../src/pool/local-provisioner.js";
import { SlotPool } from "../../src/pool/slot-pool.js";

const argv = process.argv.slice(2);
const quick = argv.includes("--quick");
const arg = (name: string, fallback: number) => {
  const i = argv.indexOf(name);
  return i >= 0 ? Number(argv[i + 1]) : fallback;
};
const ROUNDS = arg("--rounds", quick ? 40 : 200);

const pct = (xs: number[], p: number): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.ceil((p / 100) * s.length) - 1)]!;
};
const fmt = (xs: number[]) => `p50 ${pct(xs, 50).toFixed(2)} ms  p99 ${pct(xs, 99).toFixed(2)} ms  (n=${xs.length})`;
const toLoopback: LookupFunction = (_h, o, cb) => ((o as { all?: boolean }).all ? (cb as unknown as (e: null, a: unknown[]) => void)(null, [{ address: "127.0.0.1", family: 4 }]) : cb(null, "127.0.0.1", 4));

function get(url: string, headers: Record<string, string> = {}): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = request(url, { agent: false, lookup: toLoopback, headers }, (res) => {
      let n = 0;
      res.on("data", (d: Buffer) => (n += d.length));
      res.once("end", () => (res.statusCode === 200 ? resolve(n) : reject(new Error(`HTTP ${res.statusCode}`))));
    });
    req.once("error", reject);
    req.end();
  });
}

async function main(): Promise<void> {
  const baseDir = mkdtempSync(join(tmpdir(), "slotpool-portbench-"));
  chmodSync(baseDir, 0o755);
  const pool = new SlotPool({ provisioner: new LocalProvisioner({ slotsPerContainer: 2, baseDir }), slotsPerContainer: 2, minContainers: 1, maxContainers: 1 });
  await pool.start();
  const server = new E2bServer({ pool, apiKey: "bench-key", domain: (u) => `bench.test:${u.port}` });
  const url = await server.listen(0, "127.0.0.1");
  const opts = { apiUrl: url, sandboxUrl: url, apiKey: "bench-key" };
  const sbx = await Sandbox.create(opts);
  try {
    await sbx.files.write("/home/user/port-server.py", readFileSync(new URL("../e2b/fixtures/port-server.py", import.meta.url), "utf8"));
    let out = "";
    await sbx.commands.run("python3 -u /home/user/port-server.py 8000 bench", { background: true, onStdout: (d) => void (out += d) });
    while (!out.includes("listening")) await new Promise((r) => setTimeout(r, 20));
    const host = `http://${sbx.getHost(8000)}/hello`;
    const byHost: number[] = [];
    const byHeaders: number[] = [];
    const inside: number[] = [];
    const ws: number[] = [];
    for (let round = -10; round < ROUNDS; round++) {
      let t = performance.now();
      await get(host);
      const a = performance.now() - t;
      t = performance.now();
      await get(`${url}/hello`, { "E2b-Sandbox-Id": sbx.sandboxId, "E2b-Sandbox-Port": "8000" });
      const b = performance.now() - t;
      if (round >= 0) {
        byHost.push(a);
        byHeaders.push(b);
      }
    }
    // The floor: the same request from inside the sandbox, timed there (curl's own clock).
    const floor = await sbx.commands.run(`for i in $(seq 1 ${Math.min(ROUNDS, 100)}); do curl -s -o /dev/null -w '%{time_total}\\n' http://127.0.0.1:8000/hello; done`);
    inside.push(...floor.stdout.trim().split("\n").map((s) => Number(s) * 1000));
    const sock = new WebSocket(`ws://${sbx.getHost(8000)}/ws`, { lookup: toLoopback });
    await new Promise((r, j) => (sock.once("open", r), sock.once("error", j)));
    for (let round = -10; round < ROUNDS; round++) {
      const t = performance.now();
      await new Promise<void>((r) => (sock.once("message", () => r()), sock.send("ping")));
      if (round >= 0) ws.push(performance.now() - t);
    }
    sock.close();
    const big = 16 * 1024 * 1024;
    let t = performance.now();
    const n = await get(`http://${sbx.getHost(8000)}/bytes?n=${big}`);
    const mbps = n / 1024 / 1024 / ((performance.now() - t) / 1000);
    console.log(`GET through getHost (fresh connection: a tunnel each)  ${fmt(byHost)}`);
    console.log(`GET through the E2b-Sandbox-Port headers                ${fmt(byHeaders)}`);
    console.log(`GET inside the sandbox (curl to 127.0.0.1, the floor)   ${fmt(inside)}`);
    console.log(`WebSocket message round trip (open connection)          ${fmt(ws)}`);
    console.log(`16 MB download through getHost                          ${mbps.toFixed(0)} MB/s`);
    console.log(`ratio getHost p50 / inside p50                          ${(pct(byHost, 50) / pct(inside, 50)).toFixed(1)}x`);
  } finally {
    await sbx.kill();
    await server.close();
    await pool.stop({ purge: true });
    rmSync(baseDir, { recursive: true, force: true });
  }
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
