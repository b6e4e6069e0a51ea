/**
 * Cost of the host-side file tools: in process (no HTTP, no queue) write_file and
 * read_file of a small file three directories deep, artifact list of ~200 entries, the
 * archive of a 10 MB tree; then write_file + read_file through /execute of a real sandbox
 * server (needs `npm run build`). Run: npx tsx test/bench/file-tools.ts
 */
import { mkdtemp, mkdir, rm, writeFile } from "node:fs/promises";
import { randomBytes } from "node:crypto";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { readFileTool, writeFileTool } from "../../src/sandbox/tools/files.js";
import { archiveArtifacts, listArtifacts } from "../../src/sandbox/tools/artifacts.js";
import { startSandboxProcess } from "../../src/pool/sandbox-process.js";

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
  console.log(`rss after in-process runs: ${rss.toFixed(0)} MB`);

  const server = await startSandboxProcess({ slots: 1, dataDir: join(ws, "server-data") });
  try {
    const call = async (tool: string, args: Record<string, unknown>) => {
      const res = await fetch(server.url + "/execute", {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ slot_id: "slot_0", tool, args }),
      });
      const body = (await res.json()) as { success: boolean; error: string };
      if (!body.success) throw new Error(body.error);
    };
    await time("HTTP write_file + read_file (1 KB)", 500, async () => {
      await call("write_file", { path: "a/b/c/file.txt", content: "x".repeat(1024) });
      await call("read_file", { path: "a/b/c/file.txt" });
    });
  } finally {
    await server.stop();
  }
} finally {
  await rm(ws, { recursive: true, force: true });
}
