import { readFileSync } from "node:fs";
import { dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { parse } from "@cdktf/hcl2json";
import { afterEach, describe, expect, it, vi } from "vitest";
import { run as jobCommand } from "../../src/cli/job.js";
import { CliUsageError } from "../../src/cli/usage.js";
import { duration } from "../../src/nomad/job-hcl.js";
import {
  DEFAULT_IMAGE,
  IMAGE_DISK_MB,
  JOB_DEFAULTS,
  KILL_TIMEOUT_NS,
  RESCHEDULE_POLICY,
  RESTART_POLICY,
  SANDBOX_GROUP,
  SANDBOX_SERVER_PORT,
  SANDBOX_TASK,
  resolveSandboxJobOptions,
  sandboxServerArgs,
  taskConfig,
} from "../../src/nomad/job.js";

type Json = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");

/** Go duration ("30m", "5s", "1h", "1500ms") → nanoseconds. */
function ns(d: string): number {
  const m = /^(\d+)(ns|ms|s|m|h)$/.exec(d);
  if (!m) throw new Error(`not a duration: ${d}`);
  const unit = { ns: 1, ms: 1e6, s: 1e9, m: 60e9, h: 3600e9 }[m[2] as "ns"];
  return Number(m[1]) * unit;
}

/** The hcl2json form of a job file, rewritten to the Nomad API JSON shape of the fields slotpool sets. */
function hclJobToApi(parsed: Json): Json {
  const [[jobId, [job]]] = Object.entries(parsed["job"]) as [[string, Json[]]];
  const [[groupName, [group]]] = Object.entries(job!["group"]) as [[string, Json[]]];
  const [main, ...lifecycleTasks] = Object.entries(group!["task"]) as Array<[string, Json[]]>;
  const [taskName, [task]] = main!;
  const restart = group!["restart"][0];
  const reschedule = group!["reschedule"][0];
  const out: Json = {
    ID: jobId,
    Name: jobId,
    Type: job!["type"],
    Datacenters: job!["datacenters"],
    Constraints: (job!["constraint"] ?? []).map((c: Json) => ({ LTarget: c["attribute"], Operand: c["operator"], RTarget: c["value"] })),
    Update: { MaxParallel: job!["update"][0]["max_parallel"] },
    Meta: job!["meta"],
    TaskGroups: [
      {
        Name: groupName,
        Count: group!["count"],
        Networks: group!["network"].map((n: Json) => ({
          DynamicPorts: Object.entries(n["port"] as Record<string, Json[]>).map(([label, [p]]) => ({ Label: label, ...(p!["to"] !== undefined ? { To: p!["to"] } : {}) })),
        })),
        RestartPolicy: { Attempts: restart["attempts"], Interval: ns(restart["interval"]), Delay: ns(restart["delay"]), Mode: restart["mode"] },
        ...(group!["ephemeral_disk"] ? { EphemeralDisk: { SizeMB: group!["ephemeral_disk"][0]["size"], Sticky: group!["ephemeral_disk"][0]["sticky"] } } : {}),
        ReschedulePolicy: {
          Unlimited: reschedule["unlimited"],
          Delay: ns(reschedule["delay"]),
          DelayFunction: reschedule["delay_function"],
          MaxDelay: ns(reschedule["max_delay"]),
        },
        Tasks: [
          {
            Name: taskName,
            Driver: task!["driver"],
            Config: task!["config"][0],
            Resources: { CPU: task!["resources"][0]["cpu"], MemoryMB: task!["resources"][0]["memory"] },
            KillTimeout: ns(task!["kill_timeout"]),
            ...(task!["env"] !== undefined ? { Env: task!["env"] } : {}),
          },
          // The host-mode cleanup (a poststop task).
          ...lifecycleTasks.map(([name, [t]]) => ({
            Name: name,
            Driver: t!["driver"],
            Lifecycle: { Hook: t!["lifecycle"][0]["hook"], Sidecar: t!["lifecycle"][0]["sidecar"] },
            Config: t!["config"][0],
            Resources: { CPU: t!["resources"][0]["cpu"], MemoryMB: t!["resources"][0]["memory"] },
          })),
        ],
      },
    ],
  };
  for (const [hcl, api] of [["namespace", "Namespace"], ["region", "Region"], ["node_pool", "NodePool"]] as const) {
    if (job![hcl] !== undefined) out[api] = job![hcl];
  }
  return out;
}

async function render(args: string[]): Promise<string> {
  let text = "";
  const spy = vi.spyOn(process.stdout, "write").mockImplementation((chunk: string | Uint8Array) => {
    text += String(chunk);
    return true;
  });
  try {
    expect(await jobCommand(["render", ...args])).toBe(0);
  } finally {
    spy.mockRestore();
  }
  return text;
}

afterEach(() => vi.restoreAllMocks());

describe("slotpool job render", () => {
  const cases: Array<[string, string[]]> = [
    ["docker defaults", []],
    ["docker, every option", ["--job-id", "sbx-7", "--image", "reg.example/sbx:1.2", "--count", "5", "--slots", "16", "--cpu", "3000", "--memory", "8192", "--datacenter", "dc1", "--datacenter", "dc2", "--namespace", "ml", "--node-pool", "big", "--token", "tok", "--privileged"]],
    ["docker without the tun device", ["--no-tun-device"]],
    ["raw_exec", ["--driver", "raw_exec", "--image", "/opt/sbx.sif", "--command", "singularity"]],
    ["raw_exec, the host's own slotpool", ["--driver", "raw_exec"]],
    ["exec", ["--driver", "exec", "--count", "2"]],
    ["slots with a browser each", ["--slots", "2", "--browser"]],
  ];
  for (const [name, given] of cases) {
    it(`${name}: --format hcl parses with hcl2json and matches --format json`, async () => {
      // Same token in both renders (else each generates its own).
      const args = given.includes("--token") ? given : [...given, "--token", "t0k"];
      const json = JSON.parse(await render(["--format", "json", ...args])) as { Job: Json };
      const hcl = await render(["--format", "hcl", ...args]);
      const fromHcl = hclJobToApi((await parse("job.nomad.hcl", hcl)) as Json);
      // Meta.slotpool.created is "now" in each render; compare it separately.
      const created = (j: Json) => j["Meta"]["slotpool.created"];
      expect(Math.abs(Date.parse(created(fromHcl)) - Date.parse(created(json.Job)))).toBeLessThan(5_000);
      delete fromHcl["Meta"]["slotpool.created"];
      delete json.Job["Meta"]["slotpool.created"];
      expect(fromHcl).toEqual(json.Job);
    });
  }

  it("without a token, generates one and says on stderr where it is (not what it is)", async () => {
    let err = "";
    const spy = vi.spyOn(process.stderr, "write").mockImplementation((chunk: string | Uint8Array) => {
      err += String(chunk);
      return true;
    });
    const saved = process.env["SANDBOX_TOKEN"];
    delete process.env["SANDBOX_TOKEN"];
    let text: string;
    try {
      text = await render(["--format", "hcl"]);
    } finally {
      spy.mockRestore();
      if (saved !== undefined) process.env["SANDBOX_TOKEN"] = saved;
    }
    const token = /"SANDBOX_TOKEN" = "([A-Za-z0-9_-]{32})"/.exec(text)?.[1];
    expect(token).toBeDefined();
    expect(err).toMatch(/a random sandbox token was generated: it is the task's env SANDBOX_TOKEN in the rendered job/);
    expect(err).not.toContain(token!);
  });

  it("refuses slots that do not fit the allocation, with the numbers (the issue's --slots 16 --memory 256)", async () => {
    await expect(jobCommand(["render", "--slots", "16", "--memory", "256"])).rejects.toThrow(/16 slots do not fit in 256 MB: .* 16 slots need 1152 MB; raise memory to 1152 or more, or lower slots to 2 or fewer/);
    const { Job } = JSON.parse(await render(["--slots", "16", "--token", "t"])) as { Job: Json };
    expect(Job["TaskGroups"][0]["Tasks"][0]["Resources"]["MemoryMB"]).toBe(128 + 16 * 224);
    expect(Job["TaskGroups"][0]["Tasks"][0]["Config"]["args"]).toEqual(expect.arrayContaining(["--memory-mb", "224", "--disk-mb", "112"]));
  });

  it("json output is a register body with the options applied", async () => {
    const { Job } = JSON.parse(await render(["--count", "4", "--slots", "2", "--memory", "512", "--token", "t"])) as { Job: Json };
    expect(Job["TaskGroups"][0]["Count"]).toBe(4);
    expect(Job["TaskGroups"][0]["Tasks"][0]["Resources"]["MemoryMB"]).toBe(512);
    expect(Job["TaskGroups"][0]["Tasks"][0]["Config"]["args"]).toContain("2");
  });

  it("docker passes the host's /dev/net/tun (slirp4netns links network-on slots out through it), in JSON and HCL", async () => {
    const tun = [{ host_path: "/dev/net/tun", container_path: "/dev/net/tun" }];
    const { Job } = JSON.parse(await render([])) as { Job: Json };
    expect(Job["TaskGroups"][0]["Tasks"][0]["Config"]["devices"]).toEqual(tun);
    const hcl = await render(["--format", "hcl"]);
    expect(hcl).toContain(`devices      = [{ host_path = "/dev/net/tun", container_path = "/dev/net/tun" }]`);
    const config = hclJobToApi((await parse("job.nomad.hcl", hcl)) as Json)["TaskGroups"][0]["Tasks"][0]["Config"];
    expect(config["devices"]).toEqual(tun);
    // Opting out (nodes without the tun module) leaves the key out of both.
    const without = JSON.parse(await render(["--no-tun-device"])) as { Job: Json };
    expect(without.Job["TaskGroups"][0]["Tasks"][0]["Config"]).not.toHaveProperty("devices");
    expect(await render(["--format", "hcl", "--no-tun-device"])).not.toContain("devices");
    // raw_exec and exec share the host's /dev: nothing to pass.
    for (const args of [["--driver", "exec"], ["--driver", "raw_exec", "--image", "/opt/sbx.sif"]]) {
      expect((JSON.parse(await render(args)) as { Job: Json }).Job["TaskGroups"][0]["Tasks"][0]["Config"]).not.toHaveProperty("devices");
    }
  });

  it("bad flags are usage errors naming the flag", async () => {
    await expect(jobCommand(["render", "--format", "yaml"])).rejects.toThrow(/--format must be json or hcl/);
    await expect(jobCommand(["render", "--count", "x"])).rejects.toThrow(CliUsageError);
    await expect(jobCommand(["render", "--driver", "raw_exec", "--image", "img:1"])).rejects.toThrow(/not a \.sif/);
    await expect(jobCommand(["frobnicate"])).rejects.toThrow(/unknown job subcommand 'frobnicate'/);
    await expect(jobCommand([])).rejects.toThrow(/missing subcommand/);
  });
});

describe("nomad/sandbox.nomad.hcl agrees with the builder", () => {
  const load = async () => (await parse("sandbox.nomad.hcl", readFileSync(resolve(repoRoot, "nomad", "sandbox.nomad.hcl"), "utf8"))) as Json;

  it("declares the variables the issue asks for, with the builder's defaults", async () => {
    const vars = (await load())["variable"] as Record<string, Json[]>;
    expect(Object.keys(vars).sort()).toEqual(["count", "cpu", "datacenters", "image", "image_disk_mb", "insecure_registries", "memory", "seccomp_profile", "slots", "token"]);
    expect(vars["image_disk_mb"]![0]!["default"]).toBe(IMAGE_DISK_MB);
    expect(vars["insecure_registries"]![0]!["default"]).toEqual([]);
    expect(vars["image"]![0]!["default"]).toBe(DEFAULT_IMAGE);
    expect(vars["count"]![0]!["default"]).toBe(JOB_DEFAULTS.count);
    expect(vars["slots"]![0]!["default"]).toBe(JOB_DEFAULTS.slots);
    expect(vars["cpu"]![0]!["default"]).toBe(JOB_DEFAULTS.cpu);
    expect(vars["memory"]![0]!["default"]).toBe(JOB_DEFAULTS.memoryMb);
    expect(vars["datacenters"]![0]!["default"]).toEqual(JOB_DEFAULTS.datacenters);
    // Required: the servers listen beyond loopback, never without a token.
    expect(vars["token"]![0]).not.toHaveProperty("default");
    // Required: a path on the clients (the docker driver reads the profile there), never unconfined.
    expect(vars["seccomp_profile"]![0]).not.toHaveProperty("default");
  });

  it("has the builder's group, port, args, policies and meta", async () => {
    const job = hclJobToApi(await load());
    const built = resolveSandboxJobOptions({ slots: 4 });
    const group = job["TaskGroups"][0];
    const task = group["Tasks"][0];
    expect(group["Name"]).toBe(SANDBOX_GROUP);
    expect(group["Count"]).toBe("${var.count}");
    expect(group["Networks"]).toEqual([{ DynamicPorts: [{ Label: "http", To: SANDBOX_SERVER_PORT }] }]);
    expect(task["Name"]).toBe(SANDBOX_TASK);
    expect(task["Driver"]).toBe("docker");
    expect(task["Config"]["image"]).toBe("${var.image}");
    expect(task["Config"]["ports"]).toEqual(["http"]);
    expect(task["Config"]["entrypoint"]).toEqual(taskConfig(built)["entrypoint"]);
    const derived: Record<string, string> = {
      "4": "${var.slots}",
      "224": "${floor((var.memory - 128) / var.slots)}",
      "112": "${floor((var.memory - 128) / var.slots / 2)}",
      [String(built.imageBudgetMb)]: "${floor(var.image_disk_mb * 0.8)}",
    };
    // args = concat([the builder's args], one --insecure-registry pair per var.insecure_registries entry).
    const args = task["Config"]["args"] as string;
    const m = /^\$\{concat\(\[([\s\S]*)\], flatten\(\[for r in var\.insecure_registries : \["--insecure-registry", r\]\]\)\)\}$/.exec(args);
    expect(m, args).not.toBeNull();
    const literal = [...m![1]!.replace(/#.*$/gm, "").matchAll(/"((?:[^"\\]|\\.)*)"/g)].map((x) => x[1]);
    expect(literal).toEqual(sandboxServerArgs(built).map((a) => derived[a] ?? a));
    expect(group["EphemeralDisk"]).toEqual({ SizeMB: "${var.image_disk_mb}", Sticky: true });
    expect(task["Config"]["cap_add"]).toEqual(taskConfig(built)["cap_add"]);
    // The builder names this checkout's profile; the HCL leaves the clients' path to a variable.
    expect(task["Config"]["security_opt"]).toEqual((taskConfig(built)["security_opt"] as string[]).map((o) => (o.startsWith("seccomp=") ? "seccomp=${var.seccomp_profile}" : o)));
    expect(task["Config"]).not.toHaveProperty("privileged");
    expect(task["Config"]["devices"]).toEqual(taskConfig(built)["devices"]);
    expect(task["Resources"]).toEqual({ CPU: "${var.cpu}", MemoryMB: "${var.memory}" });
    expect(task["KillTimeout"]).toBe(KILL_TIMEOUT_NS);
    // Always set: no "empty token: no env" branch any more.
    expect(task["Env"]).toEqual({ SANDBOX_TOKEN: "${var.token}" });
    expect(group["RestartPolicy"]).toEqual({ ...RESTART_POLICY });
    expect(group["ReschedulePolicy"]).toEqual({ ...RESCHEDULE_POLICY });
    expect(job["Update"]).toEqual({ MaxParallel: 0 });
    expect(job["Constraints"]).toEqual([{ LTarget: "${attr.kernel.name}", Operand: "=", RTarget: "linux" }]);
    expect(job["Meta"]["slotpool"]).toBe("true");
    expect(job["Datacenters"]).toBe("${var.datacenters}");
    expect(duration(RESTART_POLICY.Interval)).toBe("30m");
  });
});

describe("nomad/dev.hcl", () => {
  it("configures the docker plugin to keep local images and enables raw_exec", async () => {
    const cfg = (await parse("dev.hcl", readFileSync(resolve(repoRoot, "nomad", "dev.hcl"), "utf8"))) as Json;
    const docker = cfg["plugin"]["docker"][0]["config"][0];
    expect(docker["gc"][0]["image"]).toBe(false);
    expect(cfg["plugin"]["raw_exec"][0]["config"][0]["enabled"]).toBe(true);
  });

  it("lets the sandbox job add its capabilities: allow_caps holds Nomad's defaults and every cap_add of the job; no privileged containers", async () => {
    const cfg = (await parse("dev.hcl", readFileSync(resolve(repoRoot, "nomad", "dev.hcl"), "utf8"))) as Json;
    const docker = cfg["plugin"]["docker"][0]["config"][0];
    const allowed = docker["allow_caps"] as string[];
    // Nomad's default allow_caps (1.1 through 1.10), lower case as current Nomad documents them.
    const nomadDefaults = ["audit_write", "chown", "dac_override", "fowner", "fsetid", "kill", "mknod", "net_bind_service", "setfcap", "setgid", "setpcap", "setuid", "sys_chroot"];
    expect(allowed).toEqual(expect.arrayContaining(nomadDefaults));
    expect(allowed).toEqual(expect.arrayContaining(taskConfig(resolveSandboxJobOptions({}))["cap_add"] as string[]));
    // And sys_ptrace, which only a job with task images under docker asks for (pool.nomad.capAdd).
    expect(allowed).toContain("sys_ptrace");
    expect(allowed).toHaveLength(nomadDefaults.length + 2);
    expect(docker).not.toHaveProperty("allow_privileged");
  });
});
