/**
 * Sandbox server benchmark (issue 2 point 3).
 *
 *   npm run build && node --import tsx test/bench/sandbox-bench.ts [--duration-ms 3000] [--quick]
 *
 * Prints, for concurrency 1, 10 and 50 (each client on its own slot): `bash true` and
 * `echo` calls/s with p50/p99; a batch of 10; write_file + read_file; 10 MB of output per
 * command with the server's peak RSS; and the floor on this machine (`sh -c true` and a
 * plain bubblewrap spawn, sequentially from Node). Numbers depend on what else runs on
 * the machine: run it on a quiet box.
 */
import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { Agent, request } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startSandboxProcess } from "../../src/pool/sandbox-process.js";
import { bwrapArgs, READ_ONLY_ROOT } from "../../src/sandbox/isolation/isolation.js";

const argv = process.argv.slice(2);
const flag = (name: string, fallback: number): number => {
  const i = argv.indexOf(`--${name}`);
  return i >= 0 ? Number(argv[i + 1]) : fallback;
};
const quick = argv.includes("--quick");
const DURATION_MS = flag("duration-ms", quick ? 1000 : 3000);
const CONCURRENCY = quick ? [1, 10] : [1, 10, 50];

function pct(sorted: number[], p: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

function fmt(n: number): string {
  return Number.isFinite(n) ? n.toFixed(2) : "-";
}

interface Row {
  name: string;
  concurrency: number;
  calls: number;
  perSec: number;
  p50: number;
  p99: number;
  extra?: string;
}
const rows: Row[] = [];

function report(r: Row): void {
  rows.push(r);
  console.log(
    `${r.name.padEnd(22)} c=${String(r.concurrency).padEnd(3)} ${String(r.calls).padStart(6)} calls ${r.perSec.toFixed(0).padStart(6)}/s  p50 ${fmt(r.p50).padStart(7)} ms  p99 ${fmt(r.p99).padStart(7)} ms${r.extra ? "  " + r.extra : ""}`,
  );
}

/** Spawns `file args` sequentially for the duration; latency of each spawn→exit. */
async function floor(name: string, file: string, args: string[], opts: { uid?: number } = {}): Promise<void> {
  const lat: number[] = [];
  const end = performance.now() + DURATION_MS;
  while (performance.now() < end) {
    const t = performance.now();
    await new Promise<void>((resolve, reject) => {
      const c = spawn(file, args, { stdio: "ignore", ...(opts.uid !== undefined ? { uid: opts.uid, gid: opts.uid } : {}) });
      c.once("error", reject);
      c.once("exit", () => resolve());
    });
    lat.push(performance.now() - t);
  }
  lat.sort((a, b) => a - b);
  report({ name, concurrency: 1, calls: lat.length, perSec: (lat.length / DURATION_MS) * 1000, p50: pct(lat, 50), p99: pct(lat, 99) });
}

const agent = new Agent({ keepAlive: true, maxSockets: 256 });

function post(url: string, path: string, body: unknown): Promise<{ status: number; json: any }> {
  const data = Buffer.from(JSON.stringify(body));
  const u = new URL(path, url);
  return new Promise((resolve, reject) => {
    const req = request(
      { agent, hostname: u.hostname, port: u.port, path: u.pathname + u.search, method: "POST", headers: { "content-type": "application/json", "content-length": data.length } },
      (res) => {
        const chunks: Buffer[] = [];
        res.on("data", (c: Buffer) => chunks.push(c));
        res.on("end", () => {
          try {
            resolve({ status: res.statusCode ?? 0, json: JSON.parse(Buffer.concat(chunks).toString("utf8")) });
          } catch (err) {
            reject(err);
          }
        });
      },
    );
    req.on("error", reject);
    req.end(data);
  });
}

/** `concurrency` clients, each on its own slot, calling `make(slot)` back to back. */
async function load(name: string, url: string, concurrency: number, make: (slot: number) => { path: string; body: unknown; calls: number }, check?: (json: any) => void): Promise<void> {
  const lat: number[] = [];
  let calls = 0;
  const end = performance.now() + DURATION_MS;
  const start = performance.now();
  await Promise.all(
    Array.from({ length: concurrency }, async (_, slot) => {
      while (performance.now() < end) {
        const req = make(slot);
        const t = performance.now();
        const r = await post(url, req.path, req.body);
        lat.push(performance.now() - t);
        if (r.status !== 200) throw new Error(`${name}: HTTP ${r.status} ${JSON.stringify(r.json)}`);
        check?.(r.json);
        calls += req.calls;
      }
    }),
  );
  const elapsed = performance.now() - start;
  lat.sort((a, b) => a - b);
  report({ name, concurrency, calls, perSec: (calls / elapsed) * 1000, p50: pct(lat, 50), p99: pct(lat, 99) });
}

function rssMb(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
  return m ? Number(m[1]) / 1024 : NaN;
}

async function main(): Promise<void> {
  console.log(`sandbox benchmark: ${DURATION_MS} ms per measurement, node ${process.version}, ${(await import("node:os")).cpus().length} cpus`);
  const isRoot = process.getuid?.() === 0;
  const ws = mkdtempSync(join(tmpdir(), "slotpool-bench-ws-"));

  console.log("\n-- floor (sequential spawns from Node) --");
  await floor("sh -c true", "/bin/sh", ["-c", "true"]);
  await floor("bash -c true", "/bin/bash", ["-c", "true"]);
  await floor("bwrap per call", "bwrap", [...bwrapArgs({ workspaceDir: ws, allowNetwork: false }), ...READ_ONLY_ROOT, "--", "/bin/bash", "-c", "true"]);

  const dataDir = mkdtempSync(join(tmpdir(), "slotpool-bench-"));
  const server = await startSandboxProcess({ slots: 50, dataDir, extraArgs: ["--slot-uid-base", "22000"], env: { SLOTPOOL_LOG_LEVEL: "warn" } });
  try {
    const url = server.url;
    const ok = (j: any) => {
      if (!j.success) throw new Error(`call failed: ${JSON.stringify(j)}`);
    };
    // Warm every slot's namespace (created on first use).
    await post(url, "/batch", Array.from({ length: 50 }, (_, i) => ({ slot_id: `slot_${i}`, tool: "bash", args: { command: "true" } })));

    console.log("\n-- sandbox server over HTTP (keep-alive), each client on its own slot --");
    for (const c of CONCURRENCY) {
      await load("bash true", url, c, (slot) => ({ path: "/execute", body: { slot_id: `slot_${slot}`, tool: "bash", args: { command: "true" } }, calls: 1 }), ok);
    }
    for (const c of CONCURRENCY) {
      await load("bash echo", url, c, (slot) => ({ path: "/execute", body: { slot_id: `slot_${slot}`, tool: "bash", args: { command: "echo hello" } }, calls: 1 }), ok);
    }
    for (const c of CONCURRENCY) {
      await load(
        "batch of 10 (calls)",
        url,
        c,
        (slot) => ({ path: "/batch", body: Array.from({ length: 10 }, () => ({ slot_id: `slot_${slot}`, tool: "bash", args: { command: "true" } })), calls: 10 }),
        (j: any[]) => j.forEach(ok),
      );
    }
    let n = 0;
    for (const c of CONCURRENCY) {
      await load(
        "write+read (pairs)",
        url,
        c,
        (slot) => {
          n++;
          return {
            path: "/batch",
            body: [
              { slot_id: `slot_${slot}`, tool: "write_file", args: { path: `f${n % 4}.txt`, content: "hello world\n".repeat(100) } },
              { slot_id: `slot_${slot}`, tool: "read_file", args: { path: `f${n % 4}.txt` } },
            ],
            calls: 1,
          };
        },
        (j: any[]) => j.forEach(ok),
      );
    }

    console.log("\n-- 10 MB of output per command --");
    for (const c of CONCURRENCY) {
      let peak = rssMb(server.pid);
      const timer = setInterval(() => (peak = Math.max(peak, rssMb(server.pid))), 10);
      const t = performance.now();
      const r = await post(
        url,
        "/batch",
        Array.from({ length: c }, (_, i) => ({ slot_id: `slot_${i}`, tool: "bash", args: { command: "head -c 10000000 /dev/zero | tr '\\0' x" }, timeout: 300 })),
      );
      clearInterval(timer);
      const ms = performance.now() - t;
      (r.json as any[]).forEach(ok);
      report({ name: "10 MB output", concurrency: c, calls: c, perSec: (c / ms) * 1000, p50: ms, p99: ms, extra: `server peak RSS ${peak.toFixed(1)} MB` });
    }
  } finally {
    await server.stop();
    rmSync(dataDir, { recursive: true, force: true });
    rmSync(ws, { recursive: true, force: true });
    agent.destroy();
  }
  if (!isRoot) console.log("\n(not root: slots share the server's uid)");
}

main().catch((err: unknown) => {
  console.error(err);
  process.exitCode = 1;
});
