/**
 * Sandboxes from task images, above the sandbox server (issues 36, 37):
 *
 *   npm run build && node --import tsx test/bench/image-sandboxes-bench.ts [--rounds 100] [--images 20] [--quick] [--part e2b|layers|fleet]
 *
 * 1. E2B: create → first result. An E2bServer over a local pool (one container, 6 slots) and a
 *    registry on loopback holding a busybox image (~2 MB). The image is fetched once (its first
 *    use: pull and unpack, as the server reports them). A template is built from that image
 *    through E2B's template API (`Template.build()`: four steps), and built again unchanged: the
 *    second build's time and how many of its steps came from the cache (target: all). Then
 *    `--rounds` rounds, each running four legs in a shuffled order: a plain sandbox
 *    (`Sandbox.create()`), one from the image, one from the built template (by name), and one
 *    from the template's own image by reference, each measured from the create call to the
 *    first command's result (`commands.run("true")`, split into create and first command), then
 *    killed. Prints p50 / p99 of each and ratios, of the p50s and paired (the median of each
 *    round's own ratio): image / plain (target: within 1.5x), built template / image (target:
 *    about 1x), built template / its own image (what the name adds: target 1x) and the
 *    template's image / the base image (what its layers cost).
 * 2. `--part layers`: what a lower layer costs, on one sandbox server: the same files as 1, 5
 *    or 20 layers over one base layer, a slot in each; each round resets every slot into its
 *    image and runs its first command (`bash -l` as E2B's commands), shuffled.
 * 3. `--images` different images on one container, all live at once: each image is the same
 *    busybox base layer and a layer of its own (1 MB of files), one slot reset into each. Prints
 *    the store on disk (what the server counts: shared layers once; what 20 separate copies
 *    would take), the sandbox server's RSS, and the memory the slots' cgroups hold after each
 *    slot read its image's files (page cache of the shared base counted once, where it lives).
 * The images are built from local files and cached under .build/test-images. On a loaded
 * 2-core box every figure moves with the load: compare within one run.
 */
import { createHash } from "node:crypto";
import { chmodSync, existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Sandbox, Template } from "e2b";
import { E2bServer } from "../../src/e2b/server.js";
import { LocalProvisioner } from "../../src/pool/local-provisioner.js";
import { SlotPool } from "../../src/pool/slot-pool.js";
import { startSandboxProcess } from "../../src/pool/sandbox-process.js";
import { cachedLayout, type Entry } from "../support/oci-image.js";
import { pushImage, startRegistry } from "../support/registry.js";
import { busyboxImage } from "../support/test-images.js";

const argv = process.argv.slice(2);
const flag = (name: string, fallback: number): number => {
  const i = argv.indexOf(`--${name}`);
  return i >= 0 ? Number(argv[i + 1]) : fallback;
};
const quick = argv.includes("--quick");
const ROUNDS = flag("rounds", quick ? 10 : 100);
const IMAGES = flag("images", 20);

function pct(values: number[], p: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}
/** `items` in an order drawn from a seeded generator (Park–Miller: the same orders every run). */
function shuffler(seed: number): <T>(items: readonly T[]) => T[] {
  const random = () => (seed = (seed * 16807) % 2147483647) / 2147483647;
  return (items) => {
    const out = [...items];
    for (let j = out.length - 1; j > 0; j--) {
      const k = Math.floor(random() * (j + 1));
      [out[j], out[k]] = [out[k]!, out[j]!];
    }
    return out;
  };
}
const mb = (bytes: number) => `${(bytes / 2 ** 20).toFixed(1)} MB`;
const loadavg = () => readFileSync("/proc/loadavg", "utf8").split(" ").slice(0, 3).join(" ");

/** `n` images sharing one base layer (static busybox and its applets), each with a layer of its own. */
function fleetImages(n: number): string[] {
  const busybox = ["/bin/busybox", "/usr/bin/busybox"].find((p) => existsSync(p))!;
  const base: Entry[] = [
    { path: "bin", type: "dir" },
    { path: "bin/busybox", fromHost: busybox, mode: 0o755 },
    ...["sh", "cat", "ls", "sleep", "wc", "true"].map((a): Entry => ({ path: `bin/${a}`, type: "symlink", target: "busybox" })),
    { path: "etc", type: "dir" },
    { path: "etc/passwd", content: "root:x:0:0:root:/root:/bin/sh\n" },
    { path: "etc/group", content: "root:x:0:\n" },
    { path: "tmp", type: "dir", mode: 0o1777 },
  ];
  return Array.from({ length: n }, (_, i) => {
    // 1 MB of incompressible bytes per image, the same for a given i (cached by content).
    const chunks: Buffer[] = [];
    let h = createHash("sha256").update(`image-${i}`).digest();
    for (let k = 0; k < (1 << 20) / 32; k++) chunks.push((h = createHash("sha256").update(h).digest()));
    const own: Entry[] = [{ path: "task", type: "dir" }, { path: "task/id.txt", content: `task ${i}\n` }, { path: "task/blob.bin", content: Buffer.concat(chunks) }];
    return cachedLayout(`fleet-${i}`, { layers: [base, own], config: { Env: ["PATH=/bin"], WorkingDir: "/task" } });
  });
}

/** Bytes under `dir` (files and their blocks as allocated), every hard link once. */
function du(dir: string): number {
  let total = 0;
  const seen = new Set<string>();
  const walk = (d: string): void => {
    for (const name of readdirSync(d)) {
      const p = join(d, name);
      const st = statSync(p, { throwIfNoEntry: false, bigint: false });
      if (!st) continue;
      const key = `${st.dev}:${st.ino}`;
      if (seen.has(key)) continue;
      seen.add(key);
      total += st.blocks * 512;
      if (st.isDirectory()) walk(p);
    }
  };
  walk(dir);
  return total;
}

async function e2bCreateToFirstResult(registryHost: string, busyboxRef: string): Promise<void> {
  const baseDir = mkdtempSync(join(tmpdir(), "slotpool-image-e2b-bench-"));
  chmodSync(baseDir, 0o755); // the slot uids (root runs) must reach their workspaces
  const pool = new SlotPool({ provisioner: new LocalProvisioner({ slotsPerContainer: 6, baseDir, extraArgs: ["--insecure-registry", registryHost] }), slotsPerContainer: 6, minContainers: 1, maxContainers: 1 });
  await pool.start();
  const apiKey = "e2b_bench_" + Math.random().toString(36).slice(2);
  const server = new E2bServer({ pool, apiKey, templates: new Map() });
  const url = await server.listen(0, "127.0.0.1");
  const opts = { apiUrl: url, sandboxUrl: url, apiKey };
  try {
    // The image's first use on the container: what fetching it cost.
    const t0 = performance.now();
    const first = await Sandbox.create(busyboxRef, opts);
    await first.commands.run("true");
    const firstMs = performance.now() - t0;
    await first.kill();
    const fetch = pool.images.fetches[0];
    console.log(`first use of ${busyboxRef}: create → first result ${firstMs.toFixed(0)} ms (pull ${fetch?.pull_ms.toFixed(0)} ms, unpack ${fetch?.unpack_ms.toFixed(0)} ms, ${mb(fetch?.pulled_bytes ?? 0)} pulled)`);
    // A template of the image, built twice: the second build reuses every step.
    const template = () => Template().fromImage(busyboxRef).setEnvs({ MODE: "bench" }).runCmd("echo built > /etc/built.txt").runCmd("mkdir -p /srv/app && echo ok > /srv/app/ok.txt").setWorkdir("/srv/app");
    const builds: Array<{ ms: number; logs: string[] }> = [];
    for (let i = 0; i < 2; i++) {
      const logs: string[] = [];
      const tb = performance.now();
      await Template.build(template(), "bench-template", { ...opts, onBuildLogs: (l) => logs.push(l.message) });
      builds.push({ ms: performance.now() - tb, logs });
    }
    const cached = (logs: string[]) => /(\d+ of \d+) steps from the cache/.exec(logs.join("\n"))?.[1] ?? "?";
    console.log(`Template.build of the image (4 steps): first ${builds[0]!.ms.toFixed(0)} ms (${cached(builds[0]!.logs)} steps from the cache), unchanged again ${builds[1]!.ms.toFixed(0)} ms (${cached(builds[1]!.logs)} steps from the cache; target: all)`);
    // The template's first use: its image comes from the building server's layout into the store (base layers shared).
    const builtImage = /image (\S+)$/.exec(builds[1]!.logs.find((l) => l.startsWith("Build finished")) ?? "")?.[1];
    if (!builtImage) throw new Error("the build's log names no image");
    const tf = performance.now();
    const firstTpl = await Sandbox.create("bench-template", opts);
    if ((await firstTpl.commands.run("cat ok.txt /etc/built.txt")).stdout !== "ok\nbuilt\n") throw new Error("the built template lacks its steps' files");
    const firstTplMs = performance.now() - tf;
    await firstTpl.kill();
    const tplFetch = pool.images.fetches.find((f) => f.image === builtImage);
    console.log(`first use of the built template: create → first result ${firstTplMs.toFixed(0)} ms (its image ${builtImage}: ${tplFetch ? `copy ${tplFetch.pull_ms.toFixed(0)} ms, unpack ${tplFetch.unpack_ms.toFixed(0)} ms, ${tplFetch.layers_reused} of ${tplFetch.layers} layers already unpacked` : "already in the store"})`);
    // Two slots in each image (two sandboxes at once, killed: their slots are reset back into
    // it), and the plain path warm. Both template legs start from the template's image: with a
    // single slot in it, the second of two such legs in a row would take the slot whose reset
    // just ended (its next session sandbox still being made), a cost of the order, not of the
    // template. With two, a leg takes the one reset earlier (pool/slot-placement.ts), as each
    // image leg does.
    for (const ref of [undefined, busyboxRef, builtImage]) {
      const pair = await Promise.all([0, 1].map(() => (ref ? Sandbox.create(ref, opts) : Sandbox.create(opts))));
      for (const s of pair) await s.commands.run("true");
      await Promise.all(pair.map((s) => s.kill()));
    }
    // Four legs a round: a plain sandbox, one from the base image, one from the built template
    // (by name), and one from the template's own image by reference (the same layers as the
    // template: what the template's name adds, if anything). Each round runs them in a shuffled
    // order (seeded), so no leg always follows the same one: a killed sandbox's slot is reset
    // and its next session sandbox made in the background, which the next leg shares the CPU with.
    const kinds = ["plain", "image", "template", "templateImage"] as const;
    type Kind = (typeof kinds)[number];
    const refOf: Record<Kind, string | undefined> = { plain: undefined, image: busyboxRef, template: "bench-template", templateImage: builtImage };
    const times = Object.fromEntries(kinds.map((k) => [k, { total: [] as number[], create: [] as number[], command: [] as number[] }])) as Record<Kind, { total: number[]; create: number[]; command: number[] }>;
    const shuffle = shuffler(37);
    for (let i = 0; i < ROUNDS; i++) {
      for (const kind of shuffle(kinds)) {
        const ref = refOf[kind];
        const t = performance.now();
        const s = ref ? await Sandbox.create(ref, opts) : await Sandbox.create(opts);
        const tc = performance.now();
        const r = await s.commands.run("true");
        const te = performance.now();
        if (r.exitCode !== 0) throw new Error(`${kind}: exit ${r.exitCode}`);
        times[kind].total.push(te - t);
        times[kind].create.push(tc - t);
        times[kind].command.push(te - tc);
        await s.kill();
      }
    }
    const p50 = (k: Kind) => pct(times[k].total, 50);
    /** Median of the rounds' own ratios: each pair ran in the same round, under the same load. */
    const paired = (a: Kind, b: Kind) => pct(times[a].total.map((x, i) => x / times[b].total[i]!), 50);
    console.log(`\nE2B create → first result, ${ROUNDS} rounds (order shuffled)            p50 ms  (create + first command)   p99 ms`);
    const label: Record<Kind, string> = {
      plain: "Sandbox.create()",
      image: "Sandbox.create(<image on the container>)",
      template: "Sandbox.create(<template built from it>)",
      templateImage: "Sandbox.create(<the template's image by reference>)",
    };
    for (const k of kinds) console.log(`  ${label[k].padEnd(58)} ${p50(k).toFixed(1).padStart(6)}  (${pct(times[k].create, 50).toFixed(1)} + ${pct(times[k].command, 50).toFixed(1)})${" ".repeat(12)}${pct(times[k].total, 99).toFixed(1).padStart(7)}`);
    const ratio = (a: Kind, b: Kind, what: string, target: string) => console.log(`  ${what.padEnd(58)} ${(p50(a) / p50(b)).toFixed(2)}x of the p50s, ${paired(a, b).toFixed(2)}x paired   (target: ${target})`);
    ratio("image", "plain", "image / plain", "<= 1.5x");
    ratio("template", "image", "built template / image", "about 1x");
    ratio("template", "templateImage", "built template / its own image by reference", "1x: the name adds nothing");
    ratio("templateImage", "image", "the template's image / the base image", "what its layers cost");
  } finally {
    await server.close();
    await pool.stop({ purge: true });
    rmSync(baseDir, { recursive: true, force: true });
  }
}

async function manyImagesOnOneContainer(registryHost: string, refs: string[]): Promise<void> {
  const dataDir = mkdtempSync(join(tmpdir(), "slotpool-image-fleet-bench-"));
  chmodSync(dataDir, 0o755);
  const server = await startSandboxProcess({ slots: refs.length, dataDir, extraArgs: ["--insecure-registry", registryHost, "--no-network"], startTimeoutMs: 120_000 });
  const post = async (path: string, body: unknown): Promise<any> => {
    const r = await fetch(server.url + path, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
    const json = await r.json();
    if (r.status !== 200) throw new Error(`${path}: HTTP ${r.status}: ${JSON.stringify(json)}`);
    return json;
  };
  const rss = () => Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${server.pid}/status`, "utf8"))?.[1] ?? 0) * 1024;
  try {
    const rssBefore = rss();
    const t0 = performance.now();
    let reused = 0;
    for (const [i, ref] of refs.entries()) {
      const r = await post("/reset", { slot_id: `slot_${i}`, image: ref });
      reused += r.image?.fetched?.layers_reused ?? 0;
    }
    const resetAllMs = performance.now() - t0;
    // Every slot reads its image's files: the shared busybox, a 1 MB file of its own.
    for (let i = 0; i < refs.length; i++) {
      const r = await post("/execute", { slot_id: `slot_${i}`, tool: "bash", args: { command: "cat /task/id.txt; wc -c < /task/blob.bin; busybox true" } });
      if (!r.success) throw new Error(`slot_${i}: ${r.error} ${r.output}`);
    }
    const list = await (await fetch(`${server.url}/images`)).json();
    const sumSizes = (list.images as Array<{ size_bytes: number }>).reduce((a, i) => a + i.size_bytes, 0);
    const store = join(dataDir, ".slotpool", "images");
    console.log(`\n${refs.length} different images on one container (one slot in each, all live)`);
    console.log(`  first fetch of all ${refs.length} (one after another)    ${(resetAllMs / 1000).toFixed(1)} s; base layer shared: ${reused} layer fetches skipped`);
    console.log(`  image store, as the server counts it       ${mb(list.used_bytes)} (shared layers once)`);
    console.log(`  the same images counted one by one          ${mb(sumSizes)} (Σ size_bytes: what ${refs.length} separate copies would take)`);
    console.log(`  image store on disk (du)                    ${existsSync(store) ? mb(du(store)) : "n/a"}`);
    console.log(`  sandbox server RSS                          ${mb(rssBefore)} before, ${mb(rss())} with ${refs.length} image roots live`);
    // The slots' memory cgroups (sandbox/isolation/cgroups.ts: slotpool-<server pid>/slot_<i>, v2 or v1's memory hierarchy).
    const mem = refs
      .map((_, i) => [`/sys/fs/cgroup/slotpool-${server.pid}/slot_${i}/memory.current`, `/sys/fs/cgroup/memory/slotpool-${server.pid}/slot_${i}/memory.usage_in_bytes`].find((f) => existsSync(f)))
      .filter((f): f is string => f !== undefined)
      .map((f) => Number(readFileSync(f, "utf8").trim()));
    if (mem.length > 0) {
      const total = mem.reduce((a, b) => a + b, 0);
      console.log(`  slots' memory cgroups (Σ, min–max a slot)  ${mb(total)} over ${mem.length} slots, ${mb(Math.min(...mem))}–${mb(Math.max(...mem))} each`);
      console.log(`    (a page is charged to the cgroup that first read it: the shared base layer's busybox (${mb(statSync(["/bin/busybox", "/usr/bin/busybox"].find((p) => existsSync(p))!).size)}) is one copy in the page cache, whatever the number of slots reading it)`);
    } else console.log("  slots' memory cgroups                      n/a (no slot cgroup readable here: a server without cgroups)");
  } finally {
    await server.stop(10_000);
    rmSync(dataDir, { recursive: true, force: true });
  }
}

/**
 * One image's content three ways: a busybox/bash base layer and 20 small files in /etc added
 * as 1, 5 or 20 more layers (as 1, 5 or 20 build steps that each write in /etc would). Same
 * files, same config: only the number of lower layers of a slot's overlay root differs.
 */
function layeredImages(): Array<{ layers: number; layout: string }> {
  const busybox = ["/bin/busybox", "/usr/bin/busybox"].find((p) => existsSync(p))!;
  const bash = ["/bin/bash-static", "/usr/bin/bash-static"].find((p) => existsSync(p))!;
  const base: Entry[] = [
    { path: "bin", type: "dir" },
    { path: "bin/busybox", fromHost: busybox, mode: 0o755 },
    { path: "bin/bash", fromHost: bash, mode: 0o755 },
    ...["sh", "cat", "ls", "true", "env", "id"].map((a): Entry => ({ path: `bin/${a}`, type: "symlink", target: "busybox" })),
    { path: "etc", type: "dir" },
    { path: "etc/passwd", content: "root:x:0:0:root:/root:/bin/sh\n" },
    { path: "etc/group", content: "root:x:0:\n" },
    { path: "root", type: "dir", mode: 0o700 },
    { path: "tmp", type: "dir", mode: 0o1777 },
  ];
  const files = Array.from({ length: 20 }, (_, i): Entry => ({ path: `etc/step-${i}.txt`, content: `step ${i}\n` }));
  return [1, 5, 20].map((n) => {
    const per = files.length / n;
    const layers = Array.from({ length: n }, (_, i): Entry[] => [{ path: "etc", type: "dir" }, ...files.slice(i * per, (i + 1) * per)]);
    return { layers: n, layout: cachedLayout(`layered-${n}`, { layers: [base, ...layers], config: { Env: ["PATH=/bin"], WorkingDir: "/root" } }) };
  });
}

/**
 * What a lower layer costs a slot: on one sandbox server, a slot per image of `layeredImages`,
 * each round resetting every slot into its image (what a release does) and then running the
 * first process session in it as the E2B API does (`bash -l -c true`: a new sandbox's first
 * command, in the fresh overlay the reset mounted), in a shuffled order.
 */
async function layerCost(registryHost: string, refs: Array<{ layers: number; ref: string }>): Promise<void> {
  const dataDir = mkdtempSync(join(tmpdir(), "slotpool-image-layers-bench-"));
  chmodSync(dataDir, 0o755);
  const server = await startSandboxProcess({ slots: refs.length, dataDir, extraArgs: ["--insecure-registry", registryHost, "--no-network"], startTimeoutMs: 120_000 });
  const post = async (path: string, body: unknown): Promise<string> => {
    const r = await fetch(server.url + path, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
    const text = await r.text();
    if (r.status !== 200) throw new Error(`${path}: HTTP ${r.status}: ${text}`);
    return text;
  };
  try {
    const times = refs.map(() => ({ reset: [] as number[], command: [] as number[] }));
    const shuffle = shuffler(36);
    // The first reset of each fetches and unpacks its image: not measured.
    for (const [i, r] of refs.entries()) await post("/reset", { slot_id: `slot_${i}`, image: r.ref });
    for (let round = 0; round < ROUNDS; round++) {
      // Every slot reset, then every slot's first command: as in E2B, where a sandbox's slot was
      // reset at the previous sandbox's kill, and its next session sandbox made since.
      for (const i of shuffle(refs.map((_, i) => i))) {
        const t0 = performance.now();
        const reset = JSON.parse(await post("/reset", { slot_id: `slot_${i}`, image: refs[i]!.ref }));
        if (!reset.success) throw new Error(`reset: ${reset.error}`);
        times[i]!.reset.push(performance.now() - t0);
      }
      for (const i of shuffle(refs.map((_, i) => i))) {
        const t1 = performance.now();
        const events = await post("/processes/start", { slot_id: `slot_${i}`, cmd: "/bin/bash", args: ["-l", "-c", "cat /etc/step-19.txt >/dev/null"], envs: { HOME: "/home/user" }, stdin: false, workspace_alias: "/home/user" });
        if (!events.includes('"exit_code":0')) throw new Error(`command: ${events.slice(-500)}`);
        times[i]!.command.push(performance.now() - t1);
      }
    }
    console.log(`\nOne image's files as 1, 5 or 20 layers over the same base layer, ${ROUNDS} rounds (sandbox server)     p50 ms`);
    for (const [i, r] of refs.entries()) console.log(`  ${`${r.layers + 1} layers (base + ${r.layers})`.padEnd(28)} reset ${pct(times[i]!.reset, 50).toFixed(1).padStart(6)}   first command (bash -l) ${pct(times[i]!.command, 50).toFixed(1).padStart(6)}`);
    const last = refs.length - 1;
    const per = (what: "reset" | "command") => (pct(times[last]![what], 50) - pct(times[0]![what], 50)) / (refs[last]!.layers - refs[0]!.layers);
    console.log(`  each more layer: reset ${per("reset").toFixed(2)} ms, first command ${per("command").toFixed(2)} ms (p50s of ${refs[last]!.layers + 1} and ${refs[0]!.layers + 1} layers)`);
  } finally {
    await server.stop(10_000);
    rmSync(dataDir, { recursive: true, force: true });
  }
}

async function main(): Promise<void> {
  console.log(`building test images (busybox, ${IMAGES} fleet images; cached after the first run)...`);
  const registry = await startRegistry();
  try {
    const busyboxRef = await pushImage(busyboxImage(), registry.host, "bench/busybox:1");
    const fleet = fleetImages(IMAGES);
    const fleetRefs: string[] = [];
    for (const [i, layout] of fleet.entries()) fleetRefs.push(await pushImage(layout, registry.host, `bench/fleet-${i}:1`));
    console.log(`load average ${loadavg()}\n`);
    const part = argv.includes("--part") ? argv[argv.indexOf("--part") + 1] : "all";
    if (!["all", "e2b", "layers", "fleet"].includes(part ?? "")) throw new Error(`--part takes e2b, layers or fleet, got ${part}`);
    if (part === "all" || part === "e2b") await e2bCreateToFirstResult(registry.host, busyboxRef);
    if (part === "all" || part === "layers") {
      const layered: Array<{ layers: number; ref: string }> = [];
      for (const l of layeredImages()) layered.push({ layers: l.layers, ref: await pushImage(l.layout, registry.host, `bench/layered-${l.layers}:1`) });
      await layerCost(registry.host, layered);
    }
    if (part === "all" || part === "fleet") await manyImagesOnOneContainer(registry.host, fleetRefs);
    console.log(`\nload average ${loadavg()}`);
  } finally {
    await registry.stop();
  }
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
