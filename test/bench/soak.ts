/**
 * Soak: `npx tsx test/bench/soak.ts [--minutes 2] [--trajectories 100] [--sample-sec 60]`
 * (run `npm run build` first; not part of CI). Runs waves of N concurrent trajectories
 * through the ToolExecutor and a SlotPool on the local provisioner (write_file, bash,
 * read_file, release with reset) for the given duration, and prints per sample: our fds and
 * RSS, the sandbox servers' fds, RSS and descendant process count, slots held, trajectories
 * done, errors. Ends with a verdict: flat, or which figure grew.
 */
import { chmodSync, mkdtempSync, readFileSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { ToolExecutor } from "../../src/executor/tool-executor.js";
import { LocalProvisioner } from "../../src/pool/local-provisioner.js";
import { SlotPool } from "../../src/pool/slot-pool.js";

const { values } = parseArgs({
  options: {
    minutes: { type: "string", default: "2" },
    trajectories: { type: "string", default: "100" },
    "sample-sec": { type: "string", default: "60" },
    "slots-per-container": { type: "string", default: "25" },
  },
});
const minutes = Number(values.minutes);
const N = Number(values.trajectories);
const sampleMs = Number(values["sample-sec"]) * 1000;
const slotsPerContainer = Number(values["slots-per-container"]);
const maxContainers = Math.ceil(N / slotsPerContainer);

const base = mkdtempSync(join(tmpdir(), "slotpool-soak-"));
chmodSync(base, 0o755);
const provisioner = new LocalProvisioner({ slotsPerContainer, baseDir: base });
const pool = new SlotPool({ slotsPerContainer, minContainers: maxContainers, maxContainers, acquireTimeoutMs: 120_000, provisioner });
const executor = new ToolExecutor({ pool, config: { acquireTimeoutMs: 120_000 } });

function fds(pid: number | "self"): number {
  try {
    return readdirSync(`/proc/${pid}/fd`).length;
  } catch {
    return 0;
  }
}
function rssMb(pid: number | "self"): number {
  try {
    const m = /VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
    return m ? Math.round(Number(m[1]) / 1024) : 0;
  } catch {
    return 0;
  }
}
/** Every descendant of `roots` (bwrap holders, spawners, commands still running). */
function descendants(roots: number[]): number {
  const children = new Map<number, number[]>();
  for (const name of readdirSync("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const stat = readFileSync(`/proc/${name}/stat`, "utf8");
      const ppid = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
      const list = children.get(ppid) ?? [];
      list.push(Number(name));
      children.set(ppid, list);
    } catch {
      /* exited */
    }
  }
  let count = 0;
  const stack = [...roots];
  while (stack.length) {
    for (const c of children.get(stack.pop()!) ?? []) {
      count++;
      stack.push(c);
    }
  }
  return count;
}

interface Sample {
  minute: string;
  trajectories: number;
  errors: number;
  our_fds: number;
  our_rss_mb: number;
  servers: number;
  server_fds: number;
  server_rss_mb: number;
  server_children: number;
  slots_held: number;
}

let done = 0;
let errors = 0;
const samples: Sample[] = [];
const t0 = Date.now();

function sample(label: string): Sample {
  const procs = provisioner.processes();
  const pids = procs.map((p) => p.pid);
  const s: Sample = {
    minute: label,
    trajectories: done,
    errors,
    our_fds: fds("self"),
    our_rss_mb: rssMb("self"),
    servers: procs.length,
    server_fds: pids.reduce((a, p) => a + fds(p), 0),
    server_rss_mb: pids.reduce((a, p) => a + rssMb(p), 0),
    server_children: descendants(pids),
    slots_held: pool.stats().slots.held,
  };
  samples.push(s);
  console.log(JSON.stringify(s));
  return s;
}

async function trajectory(id: string): Promise<void> {
  const call = (name: string, args: Record<string, unknown>) => executor.execute(id, { name, arguments: args, uniq_id: `${id}-${name}` }, { timeoutMs: 60_000 });
  try {
    const w = await call("write_file", { path: "task/input.txt", content: `payload ${id}\n` });
    const b = await call("bash", { command: "cd task && wc -c input.txt && (sleep 0.05 &) && ls -la /workspace | wc -l" });
    const r = await call("read_file", { path: "task/input.txt" });
    if (!w.success || !b.success || !r.success || !r.output.includes(id)) errors++;
  } catch {
    errors++;
  } finally {
    await executor.release(id, { reset: true }).catch(() => {
      errors++;
    });
    done++;
  }
}

console.log(`soak: ${N} concurrent trajectories per wave, ${minutes} min, ${maxContainers} local containers × ${slotsPerContainer} slots; sample every ${sampleMs / 1000} s`);
await pool.start();
await executor.start();
sample("0 (start)");
let wave = 0;
let nextSample = t0 + sampleMs;
const end = t0 + minutes * 60_000;
while (Date.now() < end) {
  wave++;
  await Promise.all(Array.from({ length: N }, (_, i) => trajectory(`w${wave}-t${i}`)));
  if (Date.now() >= nextSample) {
    sample(((Date.now() - t0) / 60_000).toFixed(1));
    nextSample += sampleMs;
  }
}
await new Promise((r) => setTimeout(r, 1_000));
const last = sample(`${((Date.now() - t0) / 60_000).toFixed(1)} (end)`);
console.table(samples);

// Verdict: compare the end with the first sample taken under load (JIT, pools and
// holders are warm by then), or with the start if the run was too short for one.
const ref = samples.length > 2 ? samples[1]! : samples[0]!;
const growth: string[] = [];
const check = (name: keyof Sample, absTol: number, relTol: number) => {
  const a = Number(ref[name]);
  const b = Number(last[name]);
  if (b > a + absTol && b > a * (1 + relTol)) growth.push(`${name} ${a} → ${b}`);
};
check("our_fds", 10, 0.2);
check("server_fds", 20, 0.2);
check("our_rss_mb", 40, 0.3);
check("server_rss_mb", 60, 0.3);
check("server_children", 8, 0.2);
check("slots_held", 0, 0);
const rate = done / ((Date.now() - t0) / 1000);
console.log(`${done} trajectories (${rate.toFixed(1)}/s), ${errors} errors, ${wave} waves`);
console.log(growth.length === 0 ? "verdict: FLAT (fds, RSS, processes and held slots did not grow)" : `verdict: GROWING: ${growth.join("; ")}`);

await executor.close();
await pool.stop({ purge: true });
rmSync(base, { recursive: true, force: true });
process.exitCode = growth.length === 0 && errors === 0 ? 0 : 1;
