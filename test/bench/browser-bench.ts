/**
 * The browser tools' costs (issue 40), on a real sandbox server with Debian's Chromium:
 *
 *   npm run build && node --import tsx test/bench/browser-bench.ts [--rounds 20] [--slots 4] [--snapshots 50]
 *
 * - first browser call of a trajectory: `browser_navigate` on a slot just reset (the browser
 *   starts: its launcher, bubblewrap, Chromium, Playwright's connection, the page), p50/p99,
 *   beside a navigation in a browser already running, and the reset of a slot whose browser runs;
 * - warm `browser_snapshot` of a form page (about 40 elements), p50/p99, one slot at a time,
 *   then every slot at once (each its own browser);
 * - memory per slot with a browser: what the slot's memory cgroup holds (root) with only its
 *   terminal, with a browser on a small page and on the form page; PSS of the browser's
 *   processes everywhere (not root: the only figure);
 * - density: `--slots` warm slots with a browser each: memory together, and the CPU the idle
 *   browsers burn over 10 s.
 * Figures move with what else runs on the machine (a shared 2-core box): compare within a run.
 */
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startSandboxProcess } from "../../src/pool/sandbox-process.js";
import { descendants } from "../../src/sandbox/run/process-barrier.js";

const argv = process.argv.slice(2);
const flag = (name: string, dflt: number) => {
  const i = argv.indexOf(`--${name}`);
  return i >= 0 ? Number(argv[i + 1]) : dflt;
};
const ROUNDS = flag("rounds", 20);
const SLOTS = flag("slots", 4);
const SNAPSHOTS = flag("snapshots", 50);

const FORM = `data:text/html,<title>Form</title><h1>Sign up</h1><form>${Array.from({ length: 12 }, (_, i) => `<p><label>Field ${i} <input name=f${i}></label></p>`).join("")}<fieldset><legend>Plan</legend>${["a", "b", "c"].map((p) => `<label><input type=radio name=p value=${p}> Plan ${p}</label>`).join("")}</fieldset><label><input type=checkbox> I agree</label><button>Send</button></form>${Array.from({ length: 10 }, (_, i) => `<p>Paragraph ${i} of text.</p>`).join("")}`;
const SMALL = "data:text/html,<title>small</title><h1>hi</h1>";

function pct(xs: number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))]!;
}
const ms = (x: number) => `${x.toFixed(x < 10 ? 1 : 0)} ms`;
const mb = (bytes: number) => `${(bytes / 1048576).toFixed(0)} MB`;

function cmdline(pid: number): string {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0").join(" ");
  } catch {
    return "";
  }
}

/** The server's real pid (its listening line), whose descendants are the slots' processes. */
let serverPid = 0;

function browserPids(slot: number): number[] {
  const main = descendants(serverPid).filter((p) => /^\S*chrom[^ ]* /.test(cmdline(p)) && cmdline(p).includes(`--slotpool-slot=slot_${slot} `));
  return main.flatMap((p) => [p, ...descendants(p)]);
}

function pss(pids: number[]): number {
  let kb = 0;
  for (const p of pids) {
    try {
      kb += Number(/^Pss:\s+(\d+)/m.exec(readFileSync(`/proc/${p}/smaps_rollup`, "utf8"))?.[1] ?? 0);
    } catch {
      /* exited */
    }
  }
  return kb * 1024;
}

function cpuTicks(pids: number[]): number {
  let t = 0;
  for (const p of pids) {
    try {
      const f = readFileSync(`/proc/${p}/stat`, "utf8").split(") ")[1]!.split(" ");
      t += Number(f[11]) + Number(f[12]);
    } catch {
      /* exited */
    }
  }
  return t;
}

/** The slot's memory cgroup usage (root with cgroups), else undefined. */
function slotCgroupBytes(slot: number): number | undefined {
  for (const [dir, file] of [
    [`/sys/fs/cgroup/slotpool-${serverPid}/slot_${slot}`, "memory.current"],
    [`/sys/fs/cgroup/memory/slotpool-${serverPid}/slot_${slot}`, "memory.usage_in_bytes"],
  ] as const) {
    try {
      return Number(readFileSync(join(dir, file), "utf8").trim());
    } catch {
      /* not this layout */
    }
  }
  return undefined;
}

async function main(): Promise<void> {
  const dataDir = mkdtempSync(join(tmpdir(), "slotpool-browser-bench-"));
  const logs: string[] = [];
  const proc = await startSandboxProcess({ slots: SLOTS, dataDir, extraArgs: ["--no-network"], startTimeoutMs: 60_000, onLog: (l) => logs.push(l) });
  serverPid = Number(/"pid":(\d+)/.exec(logs.find((l) => l.includes('"msg":"listening"')) ?? "")?.[1] ?? proc.pid);
  const call = async (slot: number, tool: string, args: Record<string, unknown> = {}): Promise<{ ms: number; r: any }> => {
    const t0 = performance.now();
    const res = await fetch(`${proc.url}/execute`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ slot_id: `slot_${slot}`, tool, args, timeout: 60 }) });
    const r = await res.json();
    const took = performance.now() - t0;
    if (!r.success) throw new Error(`${tool} on slot_${slot} failed: ${r.error}`);
    return { ms: took, r };
  };
  const reset = (slot: number) => fetch(`${proc.url}/reset`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ slot_id: `slot_${slot}` }) });
  try {
    console.log(`browser bench: ${SLOTS} slots, ${ROUNDS} rounds, ${SNAPSHOTS} snapshots; load average ${readFileSync("/proc/loadavg", "utf8").split(" ").slice(0, 3).join(" ")}`);
    // Warm-up (first Playwright load, page cache of Chromium's files): not measured.
    await call(0, "browser_navigate", { url: SMALL });
    await reset(0);

    const first: number[] = [];
    const warmNav: number[] = [];
    const resets: number[] = [];
    for (let r = 0; r < ROUNDS; r++) {
      const slot = r % SLOTS;
      const t0 = performance.now();
      await reset(slot);
      // From the second lap on, the slot's browser of the lap before is running: the reset kills it (the barrier).
      if (r >= SLOTS) resets.push(performance.now() - t0);
      // Let the reset's background re-warm settle, as a trajectory's first call would meet it.
      await new Promise((res) => setTimeout(res, 200));
      first.push((await call(slot, "browser_navigate", { url: SMALL })).ms);
      warmNav.push((await call(slot, "browser_navigate", { url: SMALL })).ms);
    }
    console.log(`first browser call (browser start + page)   p50 ${ms(pct(first, 50))}  p99 ${ms(pct(first, 99))}  (n=${first.length})`);
    console.log(`browser_navigate, browser running          p50 ${ms(pct(warmNav, 50))}  p99 ${ms(pct(warmNav, 99))}`);
    console.log(`  ratio first / running (p50)              ${(pct(first, 50) / pct(warmNav, 50)).toFixed(1)}x`);
    if (resets.length) console.log(`reset of a slot with its browser running   p50 ${ms(pct(resets, 50))}  p99 ${ms(pct(resets, 99))}  (n=${resets.length})`);

    // Memory of one slot: terminal only, + browser on a small page, + on the form page.
    await reset(0);
    await call(0, "bash_stateful", { command: "true" });
    const terminalOnly = slotCgroupBytes(0);
    await call(0, "browser_navigate", { url: SMALL });
    await new Promise((res) => setTimeout(res, 1000));
    const small = slotCgroupBytes(0);
    const smallPss = pss(browserPids(0));
    await call(0, "browser_navigate", { url: FORM });
    await new Promise((res) => setTimeout(res, 1000));
    const form = slotCgroupBytes(0);
    const formPss = pss(browserPids(0));
    if (terminalOnly !== undefined && small !== undefined && form !== undefined) {
      console.log(`slot memory (its cgroup): terminal only ${mb(terminalOnly)}, + browser on a small page ${mb(small)}, on the form page ${mb(form)}`);
    } else console.log("slot memory (its cgroup): no slot cgroups here (not root): see PSS");
    console.log(`browser PSS (all its processes): small page ${mb(smallPss)}, form page ${mb(formPss)}`);

    // Warm snapshots: one slot, then every slot at once.
    const one: number[] = [];
    for (let i = 0; i < SNAPSHOTS; i++) one.push((await call(0, "browser_snapshot")).ms);
    console.log(`browser_snapshot, warm, one slot           p50 ${ms(pct(one, 50))}  p99 ${ms(pct(one, 99))}  (n=${one.length})`);
    for (let s = 1; s < SLOTS; s++) await call(s, "browser_navigate", { url: FORM });
    const all: number[] = [];
    const t0 = performance.now();
    await Promise.all(
      Array.from({ length: SLOTS }, async (_, s) => {
        for (let i = 0; i < SNAPSHOTS; i++) all.push((await call(s, "browser_snapshot")).ms);
      }),
    );
    const wall = performance.now() - t0;
    console.log(`browser_snapshot, warm, ${SLOTS} slots at once     p50 ${ms(pct(all, 50))}  p99 ${ms(pct(all, 99))}  ${((all.length / wall) * 1000).toFixed(0)} snapshots/s`);

    // Density: every slot with a browser on the form page.
    const pids = Array.from({ length: SLOTS }, (_, s) => browserPids(s)).flat();
    const cg = Array.from({ length: SLOTS }, (_, s) => slotCgroupBytes(s));
    const cgTotal = cg.every((x) => x !== undefined) ? cg.reduce((a, b) => a! + b!, 0)! : undefined;
    const ticks0 = cpuTicks(pids);
    await new Promise((res) => setTimeout(res, 10_000));
    const idleCpu = (cpuTicks(pids) - ticks0) / 100 / 10;
    const rss = (pid: number) => Number(/^VmRSS:\s+(\d+)/m.exec(readFileSync(`/proc/${pid}/status`, "utf8"))?.[1] ?? 0) * 1024;
    const serverRss = rss(serverPid);
    const driver = descendants(serverPid).find((p) => cmdline(p).includes("driver-main"));
    const driverRss = driver ? rss(driver) : 0;
    console.log(
      `density: ${SLOTS} warm slots with a browser each: ${cgTotal !== undefined ? `slot cgroups ${mb(cgTotal)} (${mb(cgTotal / SLOTS)} a slot), ` : ""}browsers' PSS ${mb(pss(pids))} (${mb(pss(pids) / SLOTS)} a slot), server RSS ${mb(serverRss)}, its browser driver (Playwright) RSS ${mb(driverRss)}; idle browsers use ${(idleCpu * 100).toFixed(1)} % of a CPU together`,
    );
  } finally {
    await proc.stop(10_000);
    rmSync(dataDir, { recursive: true, force: true });
  }
}

await main();
