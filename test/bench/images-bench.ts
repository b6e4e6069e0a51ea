/**
 * Task images: what a reset into an image costs (issue 36).
 *
 *   npm run build && node --import tsx test/bench/images-bench.ts [--big-mb 1024] [--rounds 40] [--quick]
 *
 * Starts a registry on loopback (docker-registry) and a sandbox server (2 slots), pushes a
 * small image (busybox, bash and ~8 MB of files: ~10 MB) and a big one (`--big-mb` of
 * incompressible files; built once and cached under .build/test-images, which takes a few
 * minutes the first time), then prints:
 *  - the first fetch of each (POST /images): skopeo's pull and the unpack, as the server
 *    reports them (`fetched.pull_ms`, `unpack_ms`), and the store's size;
 *  - the reset into each, once it is in the store, p50 / p99 over `--rounds` resets (POST
 *    /reset round trip), beside a plain reset (no image) in the same run, alternating, and
 *    the ratio of the p50s; also reset + first `true` (the slot usable);
 *  - the server's RSS.
 * On a loaded 2-core box every figure moves with the load: compare within one run.
 */
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startSandboxProcess } from "../../src/pool/sandbox-process.js";
import { pushImage, startRegistry } from "../support/registry.js";
import { bigImage } from "../support/test-images.js";

const argv = process.argv.slice(2);
const flag = (name: string, fallback: number): number => {
  const i = argv.indexOf(`--${name}`);
  return i >= 0 ? Number(argv[i + 1]) : fallback;
};
const quick = argv.includes("--quick");
const BIG_MB = flag("big-mb", quick ? 128 : 1024);
const ROUNDS = flag("rounds", quick ? 15 : 40);

function pct(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

async function main(): Promise<void> {
  console.log(`building test images (small ~10 MB, big ${BIG_MB} MB; cached after the first run)...`);
  const t0 = performance.now();
  const layouts = { small: await bigImage(8), big: await bigImage(BIG_MB) };
  console.log(`  images ready in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
  const registry = await startRegistry();
  const dataDir = mkdtempSync(join(tmpdir(), "slotpool-images-bench-"));
  const refs: Record<string, string> = {};
  for (const [name, layout] of Object.entries(layouts)) refs[name] = await pushImage(layout, registry.host, `${name}:1`);
  const server = await startSandboxProcess({ slots: 2, dataDir, extraArgs: ["--insecure-registry", registry.host, "--no-network", "--image-budget-mb", String(BIG_MB * 3 + 1024)], startTimeoutMs: 60_000 });
  const post = async (path: string, body: unknown): Promise<{ ms: number; json: any }> => {
    const t = performance.now();
    const r = await fetch(server.url + path, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
    const json = await r.json();
    if (r.status !== 200) throw new Error(`${path}: HTTP ${r.status}: ${JSON.stringify(json)}`);
    return { ms: performance.now() - t, json };
  };
  try {
    console.log("\nfirst fetch (POST /images)                      total ms   pull ms  unpack ms   pulled MB   store MB");
    for (const [name, ref] of Object.entries(refs)) {
      const { ms, json } = await post("/images", { image: ref });
      const f = json.fetched;
      console.log(`  ${name.padEnd(6)} ${ref.padEnd(38)} ${ms.toFixed(0).padStart(8)} ${f.pull_ms.toFixed(0).padStart(9)} ${f.unpack_ms.toFixed(0).padStart(10)} ${(f.pulled_bytes / 2 ** 20).toFixed(1).padStart(11)} ${(json.image.size_bytes / 2 ** 20).toFixed(1).padStart(10)}`);
    }
    // Warm both paths once (the slot's user namespace and layer handles are made at its first use of an image).
    for (const ref of Object.values(refs)) await post("/reset", { slot_id: "slot_0", image: ref });
    const kinds = ["plain", "small", "big"] as const;
    const resets: Record<string, number[]> = { plain: [], small: [], big: [] };
    const usable: Record<string, number[]> = { plain: [], small: [], big: [] };
    for (let i = 0; i < ROUNDS; i++) {
      for (const k of kinds) {
        const body = k === "plain" ? { slot_id: "slot_0" } : { slot_id: "slot_0", image: refs[k] };
        const t = performance.now();
        const r = await post("/reset", body);
        resets[k]!.push(r.ms);
        await post("/execute", { slot_id: "slot_0", tool: "bash", args: { command: "true" } });
        usable[k]!.push(performance.now() - t);
      }
    }
    console.log(`\nreset of slot_0, ${ROUNDS} rounds alternating        p50 ms    p99 ms   + first call p50 ms   p50 vs plain`);
    const plainP50 = pct([...resets.plain!].sort((a, b) => a - b), 50);
    for (const k of kinds) {
      const r = [...resets[k]!].sort((a, b) => a - b);
      const u = [...usable[k]!].sort((a, b) => a - b);
      console.log(`  ${k.padEnd(44)} ${pct(r, 50).toFixed(2).padStart(8)} ${pct(r, 99).toFixed(2).padStart(9)} ${pct(u, 50).toFixed(2).padStart(21)} ${(pct(r, 50) / plainP50).toFixed(2).padStart(13)}x`);
    }
    const rss = Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${server.pid}/status`, "utf8"))?.[1] ?? 0) / 1024;
    console.log(`\nserver RSS ${rss.toFixed(0)} MB; load average ${readFileSync("/proc/loadavg", "utf8").split(" ").slice(0, 3).join(" ")}`);
  } finally {
    await server.stop(10_000);
    await registry.stop();
    rmSync(dataDir, { recursive: true, force: true });
  }
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
