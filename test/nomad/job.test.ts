import { existsSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import {
  HTTP_PORT_LABEL,
  META_CREATED,
  META_OWNER,
  META_SLOTPOOL,
  SANDBOX_GROUP,
  SANDBOX_SERVER_PORT,
  SERVER_RESERVE_MB,
  SandboxJobOptionError,
  IMAGE_DISK_MB,
  IMAGE_VOLUME,
  IMAGE_VOLUME_PATH,
  CLEANUP_TASK,
  HOST_MODE_DATA_DIR,
  hostSlotpoolMain,
  resolveSandboxJobOptions,
  sandboxJob,
  taskConfig,
} from "../../src/nomad/job.js";
import { JobRegisterRequestSchema, JobSchema } from "../../src/nomad/schemas.js";
import { fixture, structFields } from "./nomad-api-fixtures.js";

type Json = Record<string, unknown>;

interface FieldSpec {
  file: string;
  fields: Array<{ json?: string; type?: string }>;
}

/** Field name → Go type of an api.* struct in fields.json. */
function fieldTypes(struct: string): Map<string, string> {
  const all = fixture("fields.json") as { api: Record<string, FieldSpec> };
  return new Map(all.api[struct]!.fields.filter((f) => f.json && f.type).map((f) => [f.json!, f.type!]));
}

/** Keys of constraints in the documented job samples (api.Constraint is not in fields.json). */
function documentedConstraintKeys(): Set<string> {
  const job = fixture("job-read.response.json") as { Constraints: Json[] };
  return new Set(job.Constraints.flatMap((c) => Object.keys(c)));
}

/**
 * Every key of `value` must be a JSON field of the Go struct `struct` (api package, the type
 * the agent decodes request bodies into); nested structs are checked recursively, maps
 * (Meta, Env, driver Config) are free-form.
 */
function unknownKeys(value: Json, struct: string, path: string): string[] {
  const known = structFields("api", struct);
  const types = fieldTypes(struct);
  const problems: string[] = [];
  for (const [key, child] of Object.entries(value)) {
    if (!known.has(key)) {
      problems.push(`${path}.${key} is not a field of api.${struct}`);
      continue;
    }
    const type = types.get(key) ?? "";
    if (type.startsWith("map[") || child === null || typeof child !== "object") continue;
    const elem = type.replace(/^\[\]/, "").replace(/^\*/, "");
    const items = Array.isArray(child) ? (child as Json[]) : [child as Json];
    items.forEach((item, i) => {
      const at = Array.isArray(child) ? `${path}.${key}[${i}]` : `${path}.${key}`;
      if (typeof item !== "object") return;
      if (elem === "Constraint") {
        const allowed = documentedConstraintKeys();
        for (const k of Object.keys(item)) if (!allowed.has(k)) problems.push(`${at}.${k} is not a documented constraint key`);
      } else {
        problems.push(...unknownKeys(item, elem, at));
      }
    });
  }
  return problems;
}

describe("sandboxJob: keys exist in Nomad's structs (fields.json)", () => {
  const variants = {
    docker: sandboxJob({ token: "t0k", namespace: "ml", region: "eu", nodePool: "sandboxes", privileged: true }),
    raw_exec: sandboxJob({ driver: "raw_exec", image: "/images/slotpool-sandbox.sif", constraints: [{ attribute: "${meta.gpu}", value: "false" }] }),
    exec: sandboxJob({ driver: "exec", count: 0 }),
  };
  for (const [driver, job] of Object.entries(variants)) {
    it(`${driver}: every emitted key is a field of api.Job and its nested structs`, () => {
      expect(unknownKeys(job, "Job", "Job")).toEqual([]);
    });
    it(`${driver}: parses as a register request with the client's schemas`, () => {
      expect(JobRegisterRequestSchema.safeParse({ Job: job }).success).toBe(true);
      expect(JobSchema.parse(job).TaskGroups?.[0]?.Name).toBe(SANDBOX_GROUP);
    });
  }

  it("the field check catches a wrong key", () => {
    const job = sandboxJob();
    (job["TaskGroups"] as Json[])[0]!["Netwerks"] = [];
    expect(unknownKeys(job, "Job", "Job")).toEqual(["Job.TaskGroups[0].Netwerks is not a field of api.TaskGroup"]);
  });
});

describe("sandboxJob: the sandbox job of issue point 6", () => {
  const job = sandboxJob({ jobId: "sbx-1", count: 3, slots: 8, cpu: 2000, memoryMb: 4096, token: "s3cret", owner: "alice@box", created: "2026-01-02T03:04:05Z" });
  const group = (job["TaskGroups"] as Json[])[0]!;
  const task = (group["Tasks"] as Json[])[0]!;
  const config = task["Config"] as Json;

  it("one group 'sandbox' with Count = containers and a dynamic port 'http' mapped To the server port", () => {
    expect(job["Type"]).toBe("service");
    expect(job.ID).toBe("sbx-1");
    expect(group["Name"]).toBe("sandbox");
    expect(group["Count"]).toBe(3);
    expect(group["Networks"]).toEqual([{ DynamicPorts: [{ Label: HTTP_PORT_LABEL, To: SANDBOX_SERVER_PORT }] }]);
    expect(config["ports"]).toEqual(["http"]);
  });

  it("starts the server with --slots N --host 0.0.0.0 on the mapped port", () => {
    expect(task["Driver"]).toBe("docker");
    expect(config["image"]).toBe("slotpool-sandbox:local");
    // tini first: the image's init reaps what slot commands leave (Node as PID 1 does not).
    expect(config["entrypoint"]).toEqual(["tini", "-s", "--", "slotpool"]);
    // 4096 MB less the server's 128, in 8 equal shares of 496 MB; the disk half a share.
    expect(config["args"]).toEqual(["sandbox-server", "--slots", "8", "--host", "0.0.0.0", "--port", "8080", "--memory-mb", "496", "--disk-mb", "248", "--image-budget-mb", "4096"]);
  });

  it("passes the token as SANDBOX_TOKEN, never on the command line", () => {
    expect(task["Env"]).toEqual({ SANDBOX_TOKEN: "s3cret" });
    expect(JSON.stringify(config)).not.toContain("s3cret");
  });

  it("never a server without a token: with none given, a fresh random one, flagged as generated", () => {
    const a = resolveSandboxJobOptions();
    const b = resolveSandboxJobOptions();
    expect(a.tokenGenerated).toBe(true);
    expect(a.token).toMatch(/^[A-Za-z0-9_-]{32}$/);
    expect(a.token).not.toBe(b.token);
    expect(((sandboxJob({ token: "t" })["TaskGroups"] as Json[])[0]!["Tasks"] as Json[])[0]!["Env"]).toEqual({ SANDBOX_TOKEN: "t" });
    expect(resolveSandboxJobOptions({ token: "t" }).tokenGenerated).toBe(false);
    for (const driver of ["docker", "raw_exec", "exec"] as const) {
      const task = ((sandboxJob({ driver })["TaskGroups"] as Json[])[0]!["Tasks"] as Json[])[0]!;
      expect((task["Env"] as Json)["SANDBOX_TOKEN"]).toMatch(/^[A-Za-z0-9_-]{32}$/);
    }
  });

  it("a job whose slots run a browser each gets BROWSER_SLOT_MEMORY_MB more per slot and the driver's reserve by default (an explicit memory is split after that reserve)", () => {
    // The server keeps 192 MB more for its browser driver (Playwright, one process for every slot's browser).
    expect(resolveSandboxJobOptions({ slots: 4, browser: true })).toMatchObject({ memoryMb: 128 + 192 + 4 * (224 + 384), slotMemoryMb: 608, slotDiskMb: 304 });
    expect(resolveSandboxJobOptions({ slots: 4, browser: true, memoryMb: 2048 })).toMatchObject({ memoryMb: 2048, slotMemoryMb: 432 });
    expect(resolveSandboxJobOptions({ slots: 4, browser: false })).toMatchObject({ memoryMb: 1024, slotMemoryMb: 224 });
  });

  it("derives each slot's memory and disk from the allocation, or refuses with the numbers", () => {
    // The default allocation fits the default share for any slot count.
    expect(resolveSandboxJobOptions({ slots: 4 })).toMatchObject({ memoryMb: 1024, slotMemoryMb: 224, slotDiskMb: 112 });
    expect(resolveSandboxJobOptions({ slots: 16 })).toMatchObject({ memoryMb: 128 + 16 * 224, slotMemoryMb: 224 });
    const s = resolveSandboxJobOptions({ slots: 3, memoryMb: 1000 });
    expect(s).toMatchObject({ slotMemoryMb: 290, slotDiskMb: 145 });
    expect(s.slots * s.slotMemoryMb + SERVER_RESERVE_MB).toBeLessThanOrEqual(s.memoryMb);
    // The case: 16 slots in 256 MB.
    expect(() => resolveSandboxJobOptions({ slots: 16, memoryMb: 256 })).toThrow(
      "16 slots do not fit in 256 MB: the server keeps 128 MB and each slot needs at least 64 MB (its memory bound, its disk counted in it), so 16 slots need 1152 MB; raise memory to 1152 or more, or lower slots to 2 or fewer",
    );
    expect(() => resolveSandboxJobOptions({ slots: 1, memoryMb: 100 })).toThrow(/100 MB holds no slot/);
  });

  it("raw_exec without an image runs this host's own slotpool (local development)", () => {
    const s = resolveSandboxJobOptions({ driver: "raw_exec", slots: 2, token: "t" });
    expect(s.command).toBe(process.execPath);
    expect(s.commandArgs).toEqual([hostSlotpoolMain()]);
    expect(hostSlotpoolMain()).toMatch(/dist\/src\/cli\/main\.js$/);
    expect(taskConfig(s)).toEqual({
      command: process.execPath,
      args: [hostSlotpoolMain(), "sandbox-server", "--slots", "2", "--host", "${NOMAD_IP_http}", "--port", "${NOMAD_PORT_http}", "--memory-mb", "224", "--disk-mb", "112", "--data-dir", "/tmp/slotpool-nomad/${NOMAD_ALLOC_ID}", "--image-budget-mb", "4096"],
    });
    // A slotpool binary of one's own: no script before the subcommand.
    const own = taskConfig(resolveSandboxJobOptions({ driver: "raw_exec", command: "/usr/local/bin/slotpool", slots: 1 }));
    expect(own["command"]).toBe("/usr/local/bin/slotpool");
    expect((own["args"] as string[]).slice(0, 3)).toEqual(["sandbox-server", "--slots", "1"]);
    expect(() => resolveSandboxJobOptions({ driver: "docker", commandArgs: ["x"] })).toThrow(/commandArgs applies to the raw_exec driver without an image/);
  });

  it("sets cpu/memory, restart and reschedule policies", () => {
    expect(task["Resources"]).toEqual({ CPU: 2000, MemoryMB: 4096 });
    expect(group["RestartPolicy"]).toMatchObject({ Mode: "fail", Attempts: 2 });
    expect(group["ReschedulePolicy"]).toMatchObject({ Unlimited: true, DelayFunction: "exponential" });
  });

  it("has an update block that creates no deployments (MaxParallel 0)", () => {
    expect(job["Update"]).toEqual({ MaxParallel: 0 });
  });

  it("marks the job as slotpool's in Meta", () => {
    expect(job["Meta"]).toMatchObject({ [META_SLOTPOOL]: "true", [META_OWNER]: "alice@box", [META_CREATED]: "2026-01-02T03:04:05Z" });
    const fresh = sandboxJob()["Meta"] as Record<string, string>;
    expect(Date.parse(fresh[META_CREATED]!)).toBeGreaterThan(Date.now() - 60_000);
    expect(fresh[META_OWNER]).toMatch(/@/);
  });

  it("places by datacenters, namespace, node pool and constraints", () => {
    const placed = sandboxJob({ datacenters: ["dc1", "dc2"], namespace: "ml", nodePool: "sbx", constraints: [{ attribute: "${node.class}", value: "sandbox" }] });
    expect(placed["Datacenters"]).toEqual(["dc1", "dc2"]);
    expect(placed["Namespace"]).toBe("ml");
    expect(placed["NodePool"]).toBe("sbx");
    expect(placed["Constraints"]).toEqual([
      { LTarget: "${attr.kernel.name}", Operand: "=", RTarget: "linux" },
      { LTarget: "${node.class}", Operand: "=", RTarget: "sandbox" },
    ]);
  });

  it("docker gets exactly the sandbox's container options (CAP_SYS_ADMIN, the shipped seccomp profile, AppArmor unconfined), not privileged; each can be changed", () => {
    const cfg = (j: Json) => ((j["TaskGroups"] as Json[])[0]!["Tasks"] as Json[])[0]!["Config"] as Json;
    expect(cfg(sandboxJob())["cap_add"]).toEqual(["sys_admin"]);
    // Never seccomp=unconfined: the profile shipped in sandbox-image/ (Nomad's docker driver reads the file on the client).
    const profile = fileURLToPath(new URL("../../sandbox-image/seccomp.json", import.meta.url));
    expect(existsSync(profile)).toBe(true);
    expect(cfg(sandboxJob())["security_opt"]).toEqual([`seccomp=${profile}`, "apparmor=unconfined"]);
    expect(cfg(sandboxJob())).not.toHaveProperty("privileged");
    expect(cfg(sandboxJob({ capAdd: [] }))).not.toHaveProperty("cap_add");
    expect(cfg(sandboxJob({ driver: "exec" }))).not.toHaveProperty("cap_add");
    expect(cfg(sandboxJob({ privileged: true }))["privileged"]).toBe(true);
    expect(cfg(sandboxJob({ securityOpt: [] }))).not.toHaveProperty("security_opt");
  });

  it("docker gets the host's /dev/net/tun for network-on slots (slirp4netns), unless told not to", () => {
    const cfg = (j: Json) => ((j["TaskGroups"] as Json[])[0]!["Tasks"] as Json[])[0]!["Config"] as Json;
    expect(cfg(sandboxJob())["devices"]).toEqual([{ host_path: "/dev/net/tun", container_path: "/dev/net/tun" }]);
    expect(cfg(sandboxJob({ tunDevice: false }))).not.toHaveProperty("devices");
    // raw_exec and exec see the host's /dev.
    expect(cfg(sandboxJob({ driver: "exec" }))).not.toHaveProperty("devices");
  });

  it("raw_exec runs the .sif with apptainer on the host port; exec runs the slotpool binary", () => {
    const raw = sandboxJob({ driver: "raw_exec", image: "/srv/sbx.sif", slots: 2 });
    const rawGroup = (raw["TaskGroups"] as Json[])[0]!;
    const rawTask = (rawGroup["Tasks"] as Json[])[0]!;
    expect(rawTask["Driver"]).toBe("raw_exec");
    expect(rawTask["Config"]).toEqual({
      command: "apptainer",
      args: ["run", "--bind", "${NOMAD_ALLOC_DIR}", "/srv/sbx.sif", "sandbox-server", "--slots", "2", "--host", "${NOMAD_IP_http}", "--port", "${NOMAD_PORT_http}", "--memory-mb", "224", "--disk-mb", "112", "--image-budget-mb", "4096"],
    });
    // Host networking: no mapping, the server binds the allocated port itself.
    expect(rawGroup["Networks"]).toEqual([{ DynamicPorts: [{ Label: "http" }] }]);
    expect(((sandboxJob({ driver: "raw_exec", image: "x.sif", command: "singularity" })["TaskGroups"] as Json[])[0]!["Tasks"] as Json[])[0]!["Config"]).toMatchObject({ command: "singularity" });

    const exec = sandboxJob({ driver: "exec" });
    const execTask = ((exec["TaskGroups"] as Json[])[0]!["Tasks"] as Json[])[0]!;
    expect(execTask["Driver"]).toBe("exec");
    expect(execTask["Config"]).toMatchObject({ command: "/usr/local/bin/slotpool", args: ["sandbox-server", "--slots", "4", "--host", "${NOMAD_IP_http}", "--port", "${NOMAD_PORT_http}", "--memory-mb", "224", "--disk-mb", "112", "--image-budget-mb", "4096"] });
  });

  it("raw_exec with the host's own slotpool: a poststop task removes the allocation's workspaces dir, never failing the allocation", () => {
    const tasks = (j: Json) => (j["TaskGroups"] as Json[])[0]!["Tasks"] as Json[];
    const host = tasks(sandboxJob({ driver: "raw_exec" }));
    expect(host.map((t) => t["Name"])).toEqual(["sandbox-server", CLEANUP_TASK]);
    expect(host[0]!["Config"]).toMatchObject({ args: expect.arrayContaining(["--data-dir", HOST_MODE_DATA_DIR]) });
    expect(host[1]).toEqual({
      Name: CLEANUP_TASK,
      Driver: "raw_exec",
      Lifecycle: { Hook: "poststop", Sidecar: false },
      Config: { command: "/bin/sh", args: ["-c", 'rm -rf -- "$1"; exit 0', "workspace-cleanup", HOST_MODE_DATA_DIR] },
      Resources: { CPU: 20, MemoryMB: 16 },
    });
    // Other drivers keep their data in the allocation dir (Nomad's GC removes it); a data dir
    // of the operator's own is the operator's.
    for (const options of [{}, { driver: "exec" as const }, { driver: "raw_exec" as const, image: "/srv/sbx.sif" }, { driver: "raw_exec" as const, serverArgs: ["--data-dir", "/srv/slots"] }]) {
      expect(tasks(sandboxJob(options)).map((t) => t["Name"])).toEqual(["sandbox-server"]);
    }
  });

  it("rejects bad options with a message naming the problem", () => {
    expect(() => sandboxJob({ jobId: "has space" })).toThrow(/job ID 'has space'/);
    expect(() => sandboxJob({ count: -1 })).toThrow(SandboxJobOptionError);
    expect(() => sandboxJob({ slots: 0 })).toThrow(/slots must be a whole number >= 1/);
    expect(() => sandboxJob({ driver: "raw_exec", image: "busybox:1" })).toThrow(/not a \.sif/);
    expect(() => sandboxJob({ driver: "podman" as never })).toThrow(/driver must be one of docker, raw_exec, exec/);
    expect(() => sandboxJob({ datacenters: [] })).toThrow(/datacenters/);
    expect(() => sandboxJob({ datacenters: [""] })).toThrow(/none empty/);
  });
});

describe("sandboxJob: the task images' store (issue 36)", () => {
  type Any = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any
  const group = (job: Json): Any => (job["TaskGroups"] as Any[])[0]!;
  const task = (job: Json): Any => (group(job)["Tasks"] as Any[])[0]!;

  it("by default a sticky ephemeral disk of IMAGE_DISK_MB holds the images (under the server's data dir), the store's budget 80 % of it", () => {
    const job = sandboxJob({ slots: 2 });
    expect(group(job)["EphemeralDisk"]).toEqual({ SizeMB: IMAGE_DISK_MB, Sticky: true });
    expect(task(job)["Config"]["args"]).toEqual(expect.arrayContaining(["--image-budget-mb", String(Math.floor(IMAGE_DISK_MB * 0.8))]));
    expect(task(job)["Config"]["args"]).not.toContain("--image-store");
    const sized = sandboxJob({ slots: 2, imageDiskMb: 20_000, imageBudgetMb: 15_000 });
    expect(group(sized)["EphemeralDisk"]).toEqual({ SizeMB: 20_000, Sticky: true });
    const args = task(sized)["Config"]["args"] as string[];
    expect(args[args.indexOf("--image-budget-mb") + 1]).toBe("15000");
  });

  it("a host volume instead: mounted at IMAGE_VOLUME_PATH, one store per allocation index, no ephemeral disk asked", () => {
    const job = sandboxJob({ slots: 2, imageHostVolume: "images" });
    expect(group(job)).not.toHaveProperty("EphemeralDisk");
    // Field names of Nomad's api.VolumeRequest and api.VolumeMount (api/tasks.go, api/tasks.go VolumeMount), as `volume` / `volume_mount` blocks render them.
    expect(group(job)["Volumes"]).toEqual({ [IMAGE_VOLUME]: { Name: IMAGE_VOLUME, Type: "host", Source: "images", ReadOnly: false } });
    expect(task(job)["VolumeMounts"]).toEqual([{ Volume: IMAGE_VOLUME, Destination: IMAGE_VOLUME_PATH, ReadOnly: false }]);
    const args = task(job)["Config"]["args"] as string[];
    expect(args[args.indexOf("--image-store") + 1]).toBe(`${IMAGE_VOLUME_PATH}/\${NOMAD_ALLOC_INDEX}`);
    expect(args).not.toContain("--image-budget-mb");
  });

  it("registry credentials reach the task in its environment, never its arguments", () => {
    const auth = JSON.stringify({ auths: { "registry.example:5000": { auth: Buffer.from("u:p4ss").toString("base64") } } });
    const job = sandboxJob({ slots: 2, registryAuth: auth, serverArgs: ["--insecure-registry", "registry.example:5000"] });
    expect(task(job)["Env"]).toEqual({ SANDBOX_TOKEN: expect.any(String), SLOTPOOL_REGISTRY_AUTH: auth });
    expect(JSON.stringify(task(job)["Config"])).not.toContain("p4ss");
    expect(JSON.stringify(task(job)["Config"])).not.toContain(Buffer.from("u:p4ss").toString("base64"));
    expect(task(job)["Config"]["args"]).toEqual(expect.arrayContaining(["--insecure-registry", "registry.example:5000"]));
  });

  it("refuses image options that cannot work, naming them and never echoing credentials", () => {
    expect(() => sandboxJob({ driver: "raw_exec", imageHostVolume: "images" })).toThrow(/imageHostVolume needs the docker or exec driver/);
    expect(() => sandboxJob({ imageHostVolume: "images", imageDiskMb: 1000 })).toThrow(/give one/);
    expect(() => sandboxJob({ imageDiskMb: 1000, imageBudgetMb: 2000 })).toThrow(/imageBudgetMb 2000 is more than the image disk/);
    expect(() => sandboxJob({ imageDiskMb: 10 })).toThrow(/imageDiskMb must be a whole number >= 64/);
    const bad = () => sandboxJob({ registryAuth: "user:hunter2-secret" });
    expect(bad).toThrow(SandboxJobOptionError);
    expect(bad).toThrow(/registryAuth must be a Docker-style auth document/);
    expect(bad).not.toThrow(/hunter2/);
  });
});
