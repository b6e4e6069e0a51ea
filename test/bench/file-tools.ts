/**
 * In-process cost of the host-side file tools (no HTTP, no queue): write_file and
 * read_file of a small file three directories deep, artifact list of ~200 entries, and
 * the archive of a 10 MB tree. Run: npx tsx test/bench/file-tools.ts
 */
import { mkdtemp, mkdir, rm, writeFile } from "node:fs/promises";
import { randomBytes } from "node:crypto";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { readFileTool, writeFileTool } from "../../src/sandbox/files.js";
import { archiveArtifacts, listArtifacts } from "../../src/sandbox/artifacts.js";

const opts = { maxReadBytes: 10 * 1024 * 1024, maxWriteBytes: 10 * 1024 * 1024 };

async function time(label: string, n: number, fn: () => Promise<unknown>): Promise<void> {
  for (let i = 0; i < Math.min(20, n); i++) await fn(); // warm up
  const samples: number[] = [];
  for (let i = 0; i < n; i++) {
    const t = performance.now();
    await fn();
    samples.push(performance.now() - t);
  }
  samples.sort((a, b) => a - b);
  const pct = (p: number) => samples[Math.min(samples.length - 1, Math.floor(samples.length * p))]!.toFixed(3);
  const total = samples.reduce((a, b) => a + b, 0);
  console.log(`${label.padEnd(34)} n=${n}  p50 ${pct(0.5)} ms  p99 ${pct(0.99)} ms  ${(n / (total / 1000)).toFixed(0)} ops/s`);
}

const ws = await mkdtemp(join(tmpdir(), "slotpool-bench-files-"));
try {
  await time("write_file a/b/c/file.txt (1 KB)", 2000, () => writeFileTool(ws, { path: "a/b/c/file.txt", content: "x".repeat(1024) }, opts));
  await time("read_file a/b/c/file.txt (1 KB)", 2000, () => readFileTool(ws, { path: "a/b/c/file.txt" }, opts));
  for (let d = 0; d < 10; d++) {
    await mkdir(join(ws, "tree", `d${d}`), { recursive: true });
    for (let f = 0; f < 20; f++) await writeFile(join(ws, "tree", `d${d}`, `f${f}.bin`), randomBytes(50_000));
  }
  await time("artifacts list tree (210 entries)", 300, () => listArtifacts(ws, { path: "tree", recursive: true }));
  await time("artifacts archive tree (10 MB)", 10, () => archiveArtifacts(ws, { path: "tree" }));
  const rss = process.memoryUsage().rss / 1024 / 1024;
  console.log(`rss after run: ${rss.toFixed(0)} MB`);
} finally {
  await rm(ws, { recursive: true, force: true });
}
