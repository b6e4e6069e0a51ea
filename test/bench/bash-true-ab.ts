/**
 * A/B: `bash true` and slot start, this tree against a build from before a change, in ONE run
 * (issue 11's "keep `bash true` within 10 % of today's figures").
 *
 * Two sandbox servers run side by side as real processes (started like the local provisioner
 * starts one: `node <dir>/dist/src/cli/main.js sandbox-server --port 0 ...`, inside
 * `unshare --mount --propagation private` as root), with the same flags, on fresh data dirs
 * and distinct slot uid blocks. Rounds interleave the two sides (A B, then B A, ...) so drift
 * of this shared machine falls on both alike.
 *
 * Make the baseline (the commit before issue 11: the issue-11 merge 79ccb58's first parent
 * 5b5ed74, which differs from it by issue 11 alone; or issue 11's merge base 6f2d8e5):
 *
 *   git worktree add --detach /tmp/sp-base 5b5ed74 && cp -a node_modules /tmp/sp-base/ \
 *     && (cd /tmp/sp-base && npm run build)
 *   npm run build && node --import tsx test/bench/bash-true-ab.ts --baseline /tmp/sp-base \
 *     [--rounds 300] [--calls 4] [--starts 60]
 *
 * Per network mode (off: loopback only; on: on the baseline the host's network, here the
 * slot's own namespace linked out by slirp4netns), each round makes `--calls` sequential
 * `bash true` calls on a warm slot per side. Slot start: reset (not timed), then the first
 * call (timed), which on this tree waits for the slot's new namespace (and slirp4netns).
 * Prints p50/p99 per side, the ratio current/baseline and a verdict against the 10 % target.
 */
import { chmodSync, existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { startSandboxProcess, type SandboxProcess } from "../../src/pool/sandbox-process.js";
import { baselineEnv } from "./baseline.js";
import { slotpoolCommand } from "../../src/pool/slotpool-command.js";
import { percentile } from "../../src/observability/latency-window.js";

const argv = process.argv.slice(2);
const option = (name: string): string | undefined => {
  const i = argv.indexOf(`--${name}`);
  return i >= 0 ? argv[i + 1] : undefined;
};
const count = (name: string, fallback: number): number => {
  const n = Number(option(name) ?? fallback);
  if (!Number.isInteger(n) || n < 1) throw new Error(`--${name} wants a positive integer, got ${option(name)}`);
  return n;
};
const baselineDir = option("baseline");
if (!baselineDir) throw new Error("--baseline <dir> is required: a built checkout from before the change (see this file's header)");
const baselineMain = join(resolve(baselineDir), "dist", "src", "cli", "main.js");
if (!existsSync(baselineMain)) throw new Error(`no ${baselineMain}: run 'npm run build' in ${baselineDir} first`);
const ROUNDS = count("rounds", 300);
const CALLS = count("calls", 4);
const STARTS = count("starts", 60);
const TARGET = 1.1;

interface Side {
  name: "baseline" | "current";
  proc: SandboxProcess;
  dataDir: string;
}

async function startSide(name: Side["name"], uidBase: number, mainScript?: string): Promise<Side> {
  const dataDir = mkdtempSync(join(tmpdir(), `slotpool-ab-${name}-`));
  // The slot uids must traverse the data dir (mkdtemp makes it 0700), or a root server
  // would run the slots unsandboxed and the comparison would mean nothing.
  chmodSync(dataDir, 0o755);
  const env = baselineEnv(mainScript);
  const proc = await startSandboxProcess({
    slots: 2,
    dataDir,
    extraArgs: ["--slot-uid-base", String(uidBase)],
    startTimeoutMs: 120_000,
    dieWithParent: true,
    ...(mainScript ? { mainScript } : {}),
    ...(env ? { env } : {}),
  });
  return { name, proc, dataDir };
}

async function post(side: Side, path: string, body: unknown): Promise<any> {
  const res = await fetch(side.proc.url + path, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
  const json = await res.json();
  if (!res.ok) throw new Error(`${side.name} ${path}: HTTP ${res.status} ${JSON.stringify(json)}`);
  return json;
}

/** Slot 0 serves network off, slot 1 network on (each keeps its own warm state). */
const slotFor = (net: boolean) => `slot_${net ? 1 : 0}`;

async function bashTrue(side: Side, net: boolean): Promise<number> {
  const t0 = performance.now();
  const r = await post(side, "/execute", { slot_id: slotFor(net), tool: "bash", args: { command: "true", allow_network: net } });
  const ms = performance.now() - t0;
  if (!r.success) throw new Error(`${side.name}: bash true failed: ${JSON.stringify(r)}`);
  // An unsandboxed side (e.g. a data dir the slot uids cannot reach) would compare nothing.
  if (r.metadata?.sandboxed !== true) throw new Error(`${side.name}: the call ran unsandboxed: ${JSON.stringify(r.metadata)}`);
  return ms;
}

interface Stats {
  p50: number;
  p99: number;
  mean: number;
}
function stats(xs: number[]): Stats {
  const sorted = [...xs].sort((a, b) => a - b);
  return { p50: percentile(sorted, 0.5), p99: percentile(sorted, 0.99), mean: xs.reduce((a, b) => a + b, 0) / xs.length };
}

function line(label: string, base: number[], cur: number[], digits: number): { p50Ratio: number } {
  const b = stats(base);
  const c = stats(cur);
  const f = (n: number) => n.toFixed(digits).padStart(7);
  const r = (x: number, y: number) => (x / y).toFixed(3);
  console.log(
    `${label.padEnd(34)} baseline p50 ${f(b.p50)} p99 ${f(b.p99)} mean ${f(b.mean)} | current p50 ${f(c.p50)} p99 ${f(c.p99)} mean ${f(c.mean)} | ratio p50 ${r(c.p50, b.p50)} p99 ${r(c.p99, b.p99)} mean ${r(c.mean, b.mean)}  (n=${base.length}/${cur.length}, ms)`,
  );
  return { p50Ratio: c.p50 / b.p50 };
}

/** Runs `measure` for both sides each round, alternating which side goes first. */
async function interleave(sides: [Side, Side], rounds: number, measure: (side: Side) => Promise<number[]>): Promise<Map<Side, number[]>> {
  const out = new Map<Side, number[]>(sides.map((s) => [s, []]));
  for (let i = 0; i < rounds; i++) {
    const order = i % 2 === 0 ? sides : ([sides[1], sides[0]] as const);
    for (const side of order) out.get(side)!.push(...(await measure(side)));
  }
  return out;
}

const sides: Side[] = [];
try {
  sides.push(await startSide("baseline", 21_000, baselineMain));
  sides.push(await startSide("current", 22_000));
  const [baseline, current] = sides as [Side, Side];
  console.log(`baseline ${baselineMain}\ncurrent  ${slotpoolCommand().args[0]}`);
  console.log(`rounds ${ROUNDS} x ${CALLS} calls per side and mode, ${STARTS} slot starts per side and mode, interleaved\n`);

  const verdicts: string[] = [];
  for (const net of [false, true]) {
    // Warm both slots (first namespace, spawner, slirp4netns) before timing.
    for (const side of sides) for (let i = 0; i < 3; i++) await bashTrue(side, net);
    const calls = await interleave([baseline, current], ROUNDS, async (side) => {
      const ms: number[] = [];
      for (let k = 0; k < CALLS; k++) ms.push(await bashTrue(side, net));
      return ms;
    });
    const { p50Ratio } = line(`bash true, network ${net ? "on " : "off"}`, calls.get(baseline)!, calls.get(current)!, 2);
    verdicts.push(
      `bash true network ${net ? "on " : "off"}: current/baseline p50 ${p50Ratio.toFixed(3)} -> ${p50Ratio <= TARGET ? "within" : "OVER"} the 10 % target`,
    );
  }
  for (const net of [false, true]) {
    const starts = await interleave([baseline, current], STARTS, async (side) => {
      await post(side, "/reset", { slot_id: slotFor(net) });
      return [await bashTrue(side, net)];
    });
    line(`slot start (reset excluded), net ${net ? "on " : "off"}`, starts.get(baseline)!, starts.get(current)!, 1);
  }
  console.log("\n" + verdicts.join("\n"));
} finally {
  for (const side of sides) {
    await side.proc.stop(10_000);
    rmSync(side.dataDir, { recursive: true, force: true });
  }
}
