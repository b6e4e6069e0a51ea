/**
 * An env whose items use two different task images (examples/image-tasks: one item kind needs
 * the image's own python3, the other BusyBox's tools and a root-only /solution), run as a user
 * runs it: `slotpool process` of the built CLI, the oracle policy, the local provisioner, a
 * registry on loopback (Debian's docker-registry) holding images built here from local files
 * (test/support/test-images.ts). Also what goes wrong, said the way the issue asks: a missing
 * image is an infra failure counted by cause (never a reward), a reference that cannot exist a
 * usage error (exit 2) before its group runs.
 */
import { spawn } from "node:child_process";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { slotpoolCommand } from "../../src/pool/slotpool-command.js";
import { imagesMissing } from "../support/image-server.js";
import { pushImage, REGISTRY_PASSWORD, REGISTRY_USER, startRegistry, type TestRegistry } from "../support/registry.js";
import { execFileSync } from "node:child_process";
import { busyboxImage, debianPythonImage } from "../support/test-images.js";
import { startNomadEmulator } from "../support/nomad-emulator.js";

// The Debian image takes mmdebstrap and a mirror the first time (cached after): without them the run skips, saying why.
const python = imagesMissing ? undefined : debianPythonImage();
const skip = imagesMissing ?? (python && "reason" in python ? python.reason : undefined);

let dir: string;
let registry: TestRegistry | undefined;
const refs: Record<string, string> = {};

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "image-tasks-"));
  if (skip || !python || !("layout" in python)) return;
  registry = await startRegistry();
  refs["python"] = await pushImage(python.layout, registry.host, "tasks/python:1");
  refs["busybox"] = await pushImage(busyboxImage(), registry.host, "tasks/busybox:1");
}, 600_000);
afterAll(async () => {
  await registry?.stop();
  await rm(dir, { recursive: true, force: true });
});

function runCli(args: string[], env: NodeJS.ProcessEnv = {}): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const { command, args: base } = slotpoolCommand();
  return new Promise((resolve) => {
    const child = spawn(command, [...base, ...args], { stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, ...env } });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (c: Buffer) => (stdout += c.toString()));
    child.stderr.on("data", (c: Buffer) => (stderr += c.toString()));
    child.on("exit", (code) => resolve({ code, stdout, stderr }));
  });
}

/** `slotpool process` of the example with these images, on one local container of 4 slots. */
const processArgs = (out: string, images: { python: string; busybox: string }, extra: string[] = []) => [
  "process", "examples/image-tasks/env.ts", "--out", out, "--groups", "4", "--group-size", "2",
  "--slots-per-container", "4", "--max-containers", "1", "--no-progress", "--no-report",
  "--insecure-registry", registry!.host, "--set", `pythonImage=${images.python}`, "--set", `busyboxImage=${images.busybox}`, ...extra,
];

describe.skipIf(skip !== undefined)(`an env whose items use two task images, under slotpool process${skip ? ` (skipped: ${skip})` : ""}`, () => {
  it("every item of both images is solved with the oracle; the summary says which images the slots ran and what fetching them cost", async () => {
    const out = join(dir, "ok.jsonl");
    const r = await runCli(processArgs(out, { python: refs["python"]!, busybox: refs["busybox"]! }));
    expect(r.stderr).not.toMatch(/error/i);
    expect(r.code, r.stdout + r.stderr).toBe(0);
    expect(r.stdout).toMatch(/groups\s+4 made: 4 written, 0 failed, 0 filtered/);
    expect(r.stdout).toMatch(/success rate\s+100\.0%/);
    expect(r.stdout).toMatch(/infra failures\s+0/);
    // The isolation rows: both images, with the number of slots reset into each, and their first fetch.
    const root = /^ +root +(.*)$/m.exec(r.stdout)?.[1] ?? "";
    expect(root, r.stdout).not.toBe("");
    expect(root).toContain(`${refs["python"]} (sha256:`);
    expect(root).toContain(`${refs["busybox"]} (sha256:`);
    expect(root).toMatch(/: 4 slots; .*: 4 slots$/);
    // One fetch of the python image on the one container, however many slots waited for it.
    const fetches = /^ +image fetches +(.*)$/m.exec(r.stdout)?.[1] ?? "";
    expect(fetches).toMatch(new RegExp(`^${refs["python"]!.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}: pull [\\d.]+ s \\+ unpack [\\d.]+ s, [\\d.]+ MB, 1 layer \\(first use on 1 container\\(s\\)`));
    const groups = (await readFile(out, "utf8")).trim().split("\n").map((l) => JSON.parse(l) as { scores: number[] });
    expect(groups.map((g) => g.scores)).toEqual([[1, 1], [1, 1], [1, 1], [1, 1]]);
  }, 600_000);

  it("a missing image is an infra failure counted by cause, never a score; the other image's groups are written", async () => {
    const out = join(dir, "missing.jsonl");
    const missing = `${registry!.host}/tasks/not-pushed:1`;
    const r = await runCli(processArgs(out, { python: refs["python"]!, busybox: missing }, ["--set", "infraRetries=0"]));
    expect(r.code, r.stdout + r.stderr).toBe(1);
    expect(r.stdout).toMatch(/groups\s+4 made: 2 written, 2 failed/);
    expect(r.stdout).toMatch(/infra failures\s+4 trajectories not scored \(image_not_found 4\)/);
    expect(r.stdout).toMatch(/success rate\s+100\.0%/); // of what was written: the python items
    const written = (await readFile(out, "utf8")).trim().split("\n");
    expect(written).toHaveLength(2);
    // The unscored trajectories go beside the training data, each naming the image and why.
    const failed = (await readFile(join(dir, "missing.failed.jsonl"), "utf8")).trim().split("\n").map((l) => JSON.parse(l) as { cause: string; message: string; stage?: string });
    expect(failed).toHaveLength(4);
    for (const f of failed) expect(f).toMatchObject({ cause: "image_not_found", stage: "setup", message: expect.stringContaining(missing) });
  }, 600_000);

  it("an image store too small for an image is an infra failure counted as image_store_full; the image that fits is solved", async () => {
    const out = join(dir, "full.jsonl");
    // images.budgetMb reaches the servers as --image-budget-mb: the Debian python image (~78 MB
    // compressed alone) cannot fit 40 MB; the BusyBox one (~10 MB with its layers) does.
    const r = await runCli(processArgs(out, { python: refs["python"]!, busybox: refs["busybox"]! }, ["--set", "infraRetries=0", "--set", "images.budgetMb=40"]));
    expect(r.code, r.stdout + r.stderr).toBe(1);
    expect(r.stdout).toMatch(/groups\s+4 made: 2 written, 2 failed/);
    expect(r.stdout).toMatch(/infra failures\s+4 trajectories not scored \(image_store_full 4\)/);
    expect(r.stdout).toMatch(/success rate\s+100\.0%/);
    const failed = (await readFile(join(dir, "full.failed.jsonl"), "utf8")).trim().split("\n").map((l) => JSON.parse(l) as { cause: string; message: string });
    for (const f of failed) expect(f).toMatchObject({ cause: "image_store_full", message: expect.stringContaining(refs["python"]!) });
  }, 600_000);

  it("a reference that cannot name an image is a usage error (exit 2) naming it, before its group runs", async () => {
    const out = join(dir, "bad.jsonl");
    const r = await runCli(processArgs(out, { python: "Not A Reference", busybox: refs["busybox"]! }));
    expect(r.code, r.stdout + r.stderr).toBe(2);
    expect(r.stderr).toContain(`names the image "Not A Reference"`);
    expect(r.stderr).toMatch(/invalid repository name/);
  }, 300_000);

  it("--insecure-registry is checked as a usage error, and without it a plain-HTTP registry is refused by name", async () => {
    const bad = await runCli(["process", "examples/image-tasks/env.ts", "--insecure-registry", "not a host", "--no-progress"]);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain("--insecure-registry: 'not a host' is not a registry HOST[:PORT]");
    const out = join(dir, "insecure.jsonl");
    const args = processArgs(out, { python: refs["python"]!, busybox: refs["busybox"]! }, ["--set", "infraRetries=0", "--groups", "1"]);
    const i = args.indexOf("--insecure-registry");
    args.splice(i, 2);
    const r = await runCli(args);
    expect(r.code).toBe(1);
    expect(r.stdout).toMatch(/infra failures\s+2 trajectories not scored \(image_unavailable 2\)/);
    const failed = (await readFile(join(dir, "insecure.failed.jsonl"), "utf8")).trim().split("\n").map((l) => JSON.parse(l) as { message: string });
    expect(failed[0]!.message).toMatch(/\(insecure_registry\).*--insecure-registry/);
  }, 300_000);

  it("registry credentials come from the environment (SLOTPOOL_REGISTRY_AUTH), reach every server, and show in no output nor command line", async () => {
    const auth = await startRegistry({ auth: true });
    try {
      const privateBusybox = await pushImage(busyboxImage(), auth.host, "private/busybox:1", { auth: true });
      const b64 = Buffer.from(`${REGISTRY_USER}:${REGISTRY_PASSWORD}`).toString("base64");
      const doc = JSON.stringify({ auths: { [auth.host]: { auth: b64 } } });
      const out = join(dir, "auth.jsonl");
      const args = processArgs(out, { python: refs["python"]!, busybox: privateBusybox }, ["--insecure-registry", auth.host]);
      // Every command line of the run's processes while it runs (the servers' included): none holds the secret.
      const seen: string[] = [];
      let sampling = true;
      const sample = async () => {
        while (sampling) {
          seen.push(execFileSync("ps", ["-eo", "args"], { encoding: "utf8" }));
          await new Promise((r) => setTimeout(r, 100));
        }
      };
      const sampler = sample();
      const r = await runCli(args, { SLOTPOOL_REGISTRY_AUTH: doc });
      sampling = false;
      await sampler;
      expect(r.code, r.stdout + r.stderr).toBe(0);
      expect(r.stdout).toMatch(/success rate\s+100\.0%/);
      expect(r.stdout).toContain(privateBusybox);
      for (const text of [r.stdout, r.stderr, ...seen, auth.logs.join("")]) {
        expect(text).not.toContain(REGISTRY_PASSWORD);
        expect(text).not.toContain(b64);
      }
      // The samples did see the run's sandbox servers (the check above had something to look at).
      expect(seen.some((t) => t.includes("sandbox-server") && t.includes(auth.host))).toBe(true);
    } finally {
      await auth.stop();
    }
  }, 600_000);

  it("on the Nomad provisioner (the API emulator, allocations real sandbox servers): every item solved; the job carries the registry flags and the environment's credentials to its servers", async () => {
    const nomad = await startNomadEmulator({ rescheduleDelayMs: 100 });
    const auth = await startRegistry({ auth: true });
    try {
      const privatePython = await pushImage((python as { layout: string }).layout, auth.host, "private/python:1", { auth: true });
      const doc = JSON.stringify({ auths: { [auth.host]: { auth: Buffer.from(`${REGISTRY_USER}:${REGISTRY_PASSWORD}`).toString("base64") } } });
      const out = join(dir, "nomad.jsonl");
      const args = [...processArgs(out, { python: privatePython, busybox: refs["busybox"]! }, ["--insecure-registry", auth.host]), "--provisioner", "nomad", "--set", `pool.nomad.jobId=image-tasks-${process.pid}`];
      const r = await runCli(args, { NOMAD_ADDR: nomad.address, SLOTPOOL_REGISTRY_AUTH: doc });
      expect(r.code, r.stdout + r.stderr).toBe(0);
      expect(r.stdout).toMatch(/image-tasks — oracle policy, nomad provisioner/);
      expect(r.stdout).toMatch(/success rate\s+100\.0%/);
      expect(r.stdout).toMatch(/groups\s+4 made: 4 written/);
      expect(r.stdout).toContain(privatePython);
      expect(r.stdout + r.stderr).not.toContain(REGISTRY_PASSWORD);
    } finally {
      await auth.stop();
      await nomad.stop();
    }
  }, 600_000);
});
