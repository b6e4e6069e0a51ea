/**
 * Task images on a REAL Nomad agent (test/support/nomad-agent.ts; Nomad 1.1.2 in CI):
 * - `slotpool process` of examples/image-tasks (two images: the image's own python3, BusyBox
 *   and a root-only /solution) with --provisioner nomad on raw_exec (this checkout's slotpool
 *   on the node): the job as submitted (a sticky ephemeral disk for the images, the registry
 *   flags in its args) is accepted and every item is solved;
 * - the docker driver (a Docker engine and SLOTPOOL_SANDBOX_IMAGE): a slot whose root is an
 *   image inside the sandbox container, under the container's seccomp profile and capabilities
 *   (id-mapped layers, the slot's own user namespace, the store on the allocation's disk). The
 *   container's network is Docker's bridge, which cannot reach a registry on the host's
 *   loopback, so the image is copied into the allocation's directory and named `oci:`.
 * Each part says why it skips.
 */
import { execFile } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { NomadProvisioner } from "../../src/pool/nomad-provisioner.js";
import { SlotPool } from "../../src/pool/slot-pool.js";
import type { LeasedSlot } from "../../src/pool/types.js";
import { imagesMissing } from "../support/image-server.js";
import { dockerSkipReason, nomadSkipReason, nomadVersion, repoRoot, startNomadAgent, type NomadAgent } from "../support/nomad-agent.js";
import { pushImage, startRegistry, type TestRegistry } from "../support/registry.js";
import { busyboxImage, debianPythonImage } from "../support/test-images.js";

const run = promisify(execFile);
const main = `${repoRoot}/dist/src/cli/main.js`;
const python = (nomadSkipReason() ?? imagesMissing) ? undefined : debianPythonImage();
const rawSkip = nomadSkipReason() ?? imagesMissing ?? (python && "reason" in python ? python.reason : undefined);
const dockerSkip = dockerSkipReason() ?? imagesMissing;
const image = process.env["SLOTPOOL_SANDBOX_IMAGE"] ?? "";

const bash = async (slot: LeasedSlot, command: string) => {
  const r = await slot.execute({ tool: "bash", args: { command } });
  if (!r.success) throw new Error(`${command}: ${r.error}\n${r.output}`);
  return r.output.trim();
};

describe.skipIf(rawSkip !== undefined)(`task images on a real Nomad agent, raw_exec (${rawSkip ? `skipped: ${rawSkip}` : nomadVersion()})`, () => {
  let agent: NomadAgent;
  let registry: TestRegistry;
  const refs: Record<string, string> = {};

  beforeAll(async () => {
    registry = await startRegistry();
    refs["python"] = await pushImage((python as { layout: string }).layout, registry.host, "nomad/python:1");
    refs["busybox"] = await pushImage(busyboxImage(), registry.host, "nomad/busybox:1");
    agent = await startNomadAgent();
  }, 600_000);
  afterAll(async () => {
    await agent?.stop();
    await registry?.stop();
  }, 120_000);

  it("slotpool process of an env whose items use two task images solves every item with --provisioner nomad", async () => {
    const dir = mkdtempSync(join(tmpdir(), "engines-images-"));
    try {
      const jobId = `engines-images-${process.pid}`;
      const out = join(dir, "out.jsonl");
      const { stdout } = await run(
        process.execPath,
        [
          main, "process", "examples/image-tasks/env.js", "--provisioner", "nomad", "--out", out, "--no-progress", "--no-report",
          "--groups", "4", "--group-size", "2", "--slots-per-container", "4", "--max-containers", "1",
          "--set", "pool.nomad.driver=raw_exec", "--set", `pool.nomad.jobId=${jobId}`, "--set", "pool.nomad.imageDiskMb=2048",
          "--insecure-registry", registry.host, "--set", `pythonImage=${refs["python"]}`, "--set", `busyboxImage=${refs["busybox"]}`,
        ],
        { env: agent.env, cwd: repoRoot, timeout: 540_000 },
      );
      expect(stdout).toMatch(/nomad provisioner/);
      expect(stdout).toMatch(/groups\s+4 made: 4 written/);
      expect(stdout).toMatch(/success rate\s+100\.0%/);
      expect(stdout).toContain(refs["python"]);
      expect(readFileSync(out, "utf8").trim().split("\n")).toHaveLength(4);
      expect(await agent.client.readJob(jobId)).toBeNull();
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 600_000);
});

describe.skipIf(dockerSkip !== undefined)(`a task image under Nomad's docker driver (${dockerSkip ? `skipped: ${dockerSkip}` : `${nomadVersion()}, image ${image}`})`, () => {
  let agent: NomadAgent;

  beforeAll(async () => {
    agent = await startNomadAgent({ docker: true });
  }, 90_000);
  afterAll(async () => {
    await agent?.stop();
  }, 120_000);

  it("a slot's root is the image inside the sandbox container: its files, every path writable, root the slot's own, reset drops it", async () => {
    const jobId = `engines-docker-images-${process.pid}`;
    // sys_ptrace: the image mount helper opens /proc/PID/ns/user of the slot's user namespace
    // holder, a process of another uid; without CAP_SYS_PTRACE (Docker drops it) that is EACCES.
    const job = { jobId, driver: "docker" as const, image, imageDiskMb: 1024, capAdd: ["sys_admin", "sys_ptrace"] };
    const provisioner = new NomadProvisioner({ slotsPerContainer: 2, client: agent.client, job, blockingWaitMs: 10_000 });
    const pool = new SlotPool({ slotsPerContainer: 2, minContainers: 1, maxContainers: 1, tickMs: 100, startTimeoutMs: 120_000, provisioner });
    try {
      await pool.start();
      const slot = await pool.acquire({ trajectoryId: "img", timeoutMs: 90_000 });
      // Nomad names the task's container <task>-<allocation id>; /alloc is the allocation's dir (the node's own disk).
      const container = (await run("docker", ["ps", "-q", "--filter", `name=${slot.container.id}`])).stdout.trim();
      expect(container).not.toBe("");
      await run("docker", ["cp", busyboxImage(), `${container}:/alloc/data/busybox-layout`]);
      const res = await pool.useTemplate(slot, { name: "bb", image: "oci:/alloc/data/busybox-layout:latest" });
      expect(res.image?.fetched).toBeDefined();
      expect(await bash(slot, "pwd; echo $GREETING; cat /data/a.txt; id -u")).toBe("/srv/work\nhello from the image\nlinked\n0");
      expect(await bash(slot, "echo mine > /etc/mine.conf && mkdir /solution && cat /etc/mine.conf && ls -d /solution")).toBe("mine\n/solution");
      // The second slot in the same image: its own upper layer, the image unpacked once.
      const other = await pool.acquire({ trajectoryId: "img-2", timeoutMs: 90_000 });
      const again = await pool.useTemplate(other, { name: "bb", image: "oci:/alloc/data/busybox-layout:latest" });
      expect(again.image?.fetched).toBeUndefined();
      expect(await bash(other, "cat /etc/mine.conf 2>&1 || echo none")).toMatch(/none$/);
      // The server's own view of the store.
      const health = (await pool.containerHealth())[0]!.health!;
      expect(health.images?.available).toBe(true);
      expect(health.images?.cached.map((c) => c.reference)).toEqual(["oci:/alloc/data/busybox-layout:latest"]);
      await pool.release(other);
      await pool.release(slot);
    } finally {
      await pool.stop({ purge: true });
    }
    expect(await agent.client.readJob(jobId)).toBeNull();
  }, 300_000);

  it("without sys_ptrace (the default job) the server says image roots cannot be mounted, naming why, and plain slots serve", async () => {
    const jobId = `engines-docker-noptrace-${process.pid}`;
    const provisioner = new NomadProvisioner({ slotsPerContainer: 1, client: agent.client, job: { jobId, driver: "docker", image, imageDiskMb: 1024 }, blockingWaitMs: 10_000 });
    const pool = new SlotPool({ slotsPerContainer: 1, minContainers: 1, maxContainers: 1, tickMs: 100, startTimeoutMs: 120_000, provisioner });
    try {
      await pool.start();
      const slot = await pool.acquire({ trajectoryId: "img", timeoutMs: 90_000 });
      const container = (await run("docker", ["ps", "-q", "--filter", `name=${slot.container.id}`])).stdout.trim();
      await run("docker", ["cp", busyboxImage(), `${container}:/alloc/data/busybox-layout`]);
      const err = await pool.useTemplate(slot, { name: "bb", image: "oci:/alloc/data/busybox-layout:latest" }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(Error);
      expect((err as Error).message).toMatch(/\(unsupported\).*\/proc\/\d+\/ns\/user: Permission denied/);
      expect(await bash(slot, "echo plain")).toBe("plain");
      await pool.release(slot);
    } finally {
      await pool.stop({ purge: true });
    }
  }, 300_000);
});
