/**
 * The sandbox job: one Nomad service job whose task group `sandbox` runs `Count` sandbox
 * servers, each reachable on a dynamic port labelled `http`. `sandboxJob` builds the Nomad
 * API JSON (what `POST /v1/jobs` takes inside `{"Job": ...}`); `sandboxJobHcl` (job-hcl.ts)
 * renders the same settings as HCL for `nomad job run`.
 */
import { randomBytes } from "node:crypto";
import { existsSync } from "node:fs";
import { hostname, userInfo } from "node:os";
import { fileURLToPath } from "node:url";
import { SandboxJobOptionError } from "./job-errors.js";
import { HOST_MODE_DATA_DIR, cleanupTaskJson, hasCleanupTask, isHostMode } from "./host-mode.js";
import { imageStoreArgs, imageStoreGroupJson, imageStoreTaskJson, resolveJobImages, taskEnv, type JobImageOptions, type JobImageSettings } from "./job-images.js";

export { CLEANUP_TASK, HOST_MODE_DATA_DIR, hasCleanupTask, hostModeCleanupTask, isHostMode } from "./host-mode.js";
export { IMAGE_DISK_MB, IMAGE_VOLUME, IMAGE_VOLUME_PATH, taskEnv } from "./job-images.js";
export { SandboxJobOptionError } from "./job-errors.js";

export const SANDBOX_GROUP = "sandbox";
export const SANDBOX_TASK = "sandbox-server";
export const HTTP_PORT_LABEL = "http";
/** Port the server listens on inside its container; the dynamic host port maps to it. */
export const SANDBOX_SERVER_PORT = 8080;
export const DEFAULT_JOB_ID = "slotpool-sandbox";
export const DEFAULT_IMAGE = "slotpool-sandbox:local";
/** The TUN device slirp4netns opens for a network-on slot (see `tunDevice`). */
export const TUN_DEVICE = "/dev/net/tun";
/** docker: capabilities the sandbox container gets (Nomad's lower-case spelling; see `capAdd`). */
export const DOCKER_CAP_ADD = ["sys_admin"] as const;
/**
 * The container's seccomp profile shipped with slotpool (sandbox-image/seccomp.json: Docker's
 * default profile plus pivot_root, see sandbox-image/seccomp-profile.md), at this checkout's or
 * package's path (src/nomad/ or dist/src/nomad/ below the root). Nomad's docker driver reads
 * the file on the client host, so on a cluster it must exist at this path on every client
 * (or pass `securityOpt` naming where it is).
 */
export function shippedSeccompProfile(): string {
  const fromSrc = fileURLToPath(new URL("../../sandbox-image/seccomp.json", import.meta.url));
  return existsSync(fromSrc) ? fromSrc : fileURLToPath(new URL("../../../sandbox-image/seccomp.json", import.meta.url));
}

/** docker: security options the sandbox container gets (see `securityOpt`). */
export function dockerSecurityOpt(profile = shippedSeccompProfile()): string[] {
  return [`seccomp=${profile}`, "apparmor=unconfined"];
}
/** docker: the image's init, before the server command (sandbox-image/ installs tini). */
export const DOCKER_INIT = ["tini", "-s", "--"] as const;

/** Meta keys marking a job as slotpool's, so `slotpool jobs prune` can find orphans. */
export const META_SLOTPOOL = "slotpool";
export const META_OWNER = "slotpool.owner";
export const META_CREATED = "slotpool.created";
export const META_SLOTS = "slotpool.slots";

export type SandboxDriver = "docker" | "raw_exec" | "exec";
export const SANDBOX_DRIVERS: readonly SandboxDriver[] = ["docker", "raw_exec", "exec"];

export interface JobConstraint {
  /** e.g. "${attr.kernel.name}" */
  attribute: string;
  /** e.g. "=", "!=", "regexp", "version", "distinct_hosts" */
  operator?: string;
  value?: string;
}

/** A Nomad `spread` block: allocations spread over the values of `attribute` (e.g. "${node.unique.id}"). */
export interface JobSpread {
  attribute: string;
  /** 0-100 (Nomad's default 50). */
  weight?: number;
  /** Desired share per value; values not named share the rest. */
  targets?: Array<{ value: string; percent: number }>;
}

export interface SandboxJobOptions extends JobImageOptions {
  jobId?: string;
  /** Number of sandbox servers (containers). */
  count?: number;
  /** Slots per sandbox server. */
  slots?: number;
  driver?: SandboxDriver;
  /**
   * docker: the image (must have `slotpool` on its PATH, as sandbox-image/ has). raw_exec:
   * path of a `.sif` (run with apptainer/singularity), or none: the host's own slotpool
   * (local development without an image, see `command`).
   */
  image?: string;
  /**
   * docker: the entrypoint (default "slotpool"). raw_exec with a .sif: "apptainer" (default)
   * or "singularity"; raw_exec without an image: the program that runs slotpool on the host
   * (default: this node binary, with this checkout's dist/src/cli/main.js as `commandArgs`).
   * exec: the slotpool binary (default "/usr/local/bin/slotpool").
   */
  command?: string;
  /** raw_exec without an image: arguments before `sandbox-server` (default: [this checkout's main.js] when `command` is not given, else []). */
  commandArgs?: string[];
  /** MHz of CPU per server. */
  cpu?: number;
  /**
   * Memory per server (the allocation), MB. Default: what `slots` need at the default share
   * (SERVER_RESERVE_MB + slots × DEFAULT_SLOT_MEMORY_MB). Each slot gets an equal part of what
   * the server does not keep: `--memory-mb` = (memoryMb − SERVER_RESERVE_MB) / slots, and half
   * of that as its disk (`--disk-mb`, a tmpfs whose pages count as the slot's memory).
   */
  memoryMb?: number;
  /**
   * The slots run a browser each (the env offers the browser tools): the default memory adds
   * BROWSER_SLOT_MEMORY_MB to every slot's share. Ignored when `memoryMb` is given.
   */
  browser?: boolean;
  /** Bearer token the servers require; passed to the task as env SANDBOX_TOKEN. Default: a fresh random one (see `tokenGenerated`). */
  token?: string;
  datacenters?: string[];
  namespace?: string;
  region?: string;
  nodePool?: string;
  constraints?: JobConstraint[];
  /** Spread blocks: e.g. `[{ attribute: "${node.unique.id}" }]` puts the containers on as many nodes as it can. */
  spreads?: JobSpread[];
  /**
   * docker: run privileged (needs `allow_privileged` in the docker plugin config). Not needed
   * (`capAdd` + `securityOpt` sandbox fully) and on some hosts runc cannot even start it.
   */
  privileged?: boolean;
  /**
   * docker: capabilities added to the container. Default `["sys_admin"]` (the client's docker
   * plugin must list it in `allow_caps`, as nomad/dev.hcl does): the server's own mount
   * namespace, where it uncovers Docker's masked /proc paths, makes its slot cgroups and
   * disks, and bubblewrap's namespaces (docs/security-model.md says what this gives away).
   */
  capAdd?: string[];
  /**
   * docker: security options. Default `["seccomp=<shipped profile>", "apparmor=unconfined"]`:
   * the shipped profile is docker's default plus pivot_root, which bubblewrap needs and
   * docker's default refuses even with CAP_SYS_ADMIN (no `seccomp=unconfined`); AppArmor's
   * docker-default refuses mount where AppArmor is on.
   */
  securityOpt?: string[];
  /**
   * docker: pass the host's /dev/net/tun into the container (default true). Slots with
   * network on are linked out by slirp4netns, which makes its tap device through it; docker
   * gives a container no /dev/net/tun, and without it the server refuses network on (calls
   * run loopback-only). Set false for nodes without the tun module: docker refuses to start
   * a container whose device is missing on the host.
   */
  tunDevice?: boolean;
  /** Who started the job (Meta slotpool.owner); default user@host. */
  owner?: string;
  /** When (Meta slotpool.created, ISO 8601); default now. */
  created?: string;
  /** More Meta entries. */
  meta?: Record<string, string>;
  /** Extra arguments for `slotpool sandbox-server` (e.g. ["--no-network"]). */
  serverArgs?: string[];
}

/** Every option resolved to a value: the one input of both the JSON and the HCL renderer. */
export interface SandboxJobSettings extends JobImageSettings {
  jobId: string;
  count: number;
  slots: number;
  driver: SandboxDriver;
  image: string;
  command: string;
  commandArgs: string[];
  cpu: number;
  memoryMb: number;
  /** Each slot's memory bound (`--memory-mb`), MB: its share of the allocation. */
  slotMemoryMb: number;
  /** Each slot's disk bound (`--disk-mb`), MB: half its memory share. */
  slotDiskMb: number;
  token: string;
  /** No token was given: `token` was generated here (a renderer must say so). */
  tokenGenerated: boolean;
  datacenters: string[];
  namespace: string | undefined;
  region: string | undefined;
  nodePool: string | undefined;
  constraints: Array<{ attribute: string; operator: string; value: string | undefined }>;
  spreads: JobSpread[];
  privileged: boolean;
  capAdd: string[];
  securityOpt: string[];
  tunDevice: boolean;
  meta: Record<string, string>;
  serverArgs: string[];
}


/** What a server keeps for itself (node, its spawners) before the slots' shares, MB. */
export const SERVER_RESERVE_MB = 128;
/** Each slot's default share of the allocation, MB (4 slots: a 1024 MB allocation). */
export const DEFAULT_SLOT_MEMORY_MB = 224;
/**
 * What a slot's browser adds to its default share, MB: a headless Chromium charges about 150 MB
 * to its slot's cgroup on a small page (docs/browser.md, test/bench/browser-bench.ts), and an
 * application's page a few hundred more.
 */
export const BROWSER_SLOT_MEMORY_MB = 384;
/**
 * What the server keeps more when its slots browse, MB: its browser driver, the one process
 * that runs Playwright for every slot's browser (about 130 MB with a few browsers, measured).
 */
export const BROWSER_DRIVER_MB = 192;

/** What a server keeps for itself before the slots' shares, MB (`browser`: its browser driver too). */
export function serverReserveMb(browser = false): number {
  return SERVER_RESERVE_MB + (browser ? BROWSER_DRIVER_MB : 0);
}
/** The smallest share a slot may get, MB: below it a shell and its tools hardly start. */
export const MIN_SLOT_MEMORY_MB = 64;

export const JOB_DEFAULTS = {
  count: 1,
  slots: 4,
  cpu: 1000,
  memoryMb: SERVER_RESERVE_MB + 4 * DEFAULT_SLOT_MEMORY_MB,
  // "dc1" is every Nomad agent's default datacenter (dev agents included); the "*" wildcard
  // only exists since Nomad 1.6, and 1.1-1.5 place nothing with it.
  datacenters: ["dc1"],
  driver: "docker" as SandboxDriver,
};

/** The allocation memory `slots` slots get by default, MB (`browser`: each with a browser). */
export function defaultMemoryMb(slots: number, browser = false): number {
  return serverReserveMb(browser) + slots * (DEFAULT_SLOT_MEMORY_MB + (browser ? BROWSER_SLOT_MEMORY_MB : 0));
}

/**
 * This checkout's CLI (dist/src/cli/main.js), for raw_exec's local development mode: from the
 * built module itself, or, from the TypeScript sources (tests), the build beside them.
 */
export function hostSlotpoolMain(): string {
  const built = fileURLToPath(new URL("../cli/main.js", import.meta.url));
  if (existsSync(built)) return built;
  return fileURLToPath(new URL("../../dist/src/cli/main.js", import.meta.url));
}

/** Restart in place twice within 30 min, then fail the allocation so it is rescheduled. */
export const RESTART_POLICY = { Attempts: 2, Interval: 30 * 60e9, Delay: 5e9, Mode: "fail" } as const;
/** Replace failed allocations without limit, quickly at first (5 s), backing off to 1 min. */
export const RESCHEDULE_POLICY = { Unlimited: true, Delay: 5e9, DelayFunction: "exponential", MaxDelay: 60e9 } as const;
/** Time the server gets after SIGTERM to stop its slots' processes. */
export const KILL_TIMEOUT_NS = 15e9;


export function resolveSandboxJobOptions(options: SandboxJobOptions = {}): SandboxJobSettings {
  const jobId = options.jobId ?? DEFAULT_JOB_ID;
  // Nomad accepts more, but job IDs end up in allocation names, URLs and Meta: keep them plain.
  if (!/^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/.test(jobId)) {
    throw new SandboxJobOptionError(`job ID '${jobId}' must be 1-128 letters, digits, '.', '_' or '-', starting with a letter or digit`);
  }
  const driver = options.driver ?? JOB_DEFAULTS.driver;
  if (!SANDBOX_DRIVERS.includes(driver)) {
    throw new SandboxJobOptionError(`driver must be one of ${SANDBOX_DRIVERS.join(", ")}, got '${String(driver)}'`);
  }
  const count = whole("count", options.count ?? JOB_DEFAULTS.count, 0);
  const slots = whole("slots", options.slots ?? JOB_DEFAULTS.slots, 1);
  const cpu = whole("cpu", options.cpu ?? JOB_DEFAULTS.cpu, 1);
  const memoryMb = whole("memory", options.memoryMb ?? defaultMemoryMb(slots, options.browser === true), 16);
  const { slotMemoryMb, slotDiskMb } = slotShares(slots, memoryMb, serverReserveMb(options.browser === true));
  // raw_exec runs a .sif with apptainer, or, given no image, the host's own slotpool.
  const hostMode = driver === "raw_exec" && options.image === undefined;
  const image = options.image ?? (hostMode ? "" : DEFAULT_IMAGE);
  if (!image && !hostMode) throw new SandboxJobOptionError("image must not be empty");
  if (driver === "raw_exec" && !hostMode && !image.endsWith(".sif")) {
    throw new SandboxJobOptionError(
      `the raw_exec driver runs a .sif with apptainer/singularity, or, with no image, the host's own slotpool; image '${image}' is not a .sif path`,
    );
  }
  const command =
    options.command ?? (hostMode ? process.execPath : driver === "raw_exec" ? "apptainer" : driver === "exec" ? "/usr/local/bin/slotpool" : "");
  if (options.commandArgs && !hostMode) throw new SandboxJobOptionError("commandArgs applies to the raw_exec driver without an image only (the host's own slotpool)");
  const commandArgs = hostMode ? [...(options.commandArgs ?? (options.command === undefined ? [hostSlotpoolMain()] : []))] : [];
  const datacenters = options.datacenters ?? JOB_DEFAULTS.datacenters;
  if (datacenters.length === 0 || datacenters.some((d) => !d)) throw new SandboxJobOptionError("datacenters must name at least one datacenter, none empty (Nomad's default is \"dc1\")");
  if (options.token !== undefined && options.token === "") throw new SandboxJobOptionError("token must not be empty");
  // Every server listens beyond loopback (docker: 0.0.0.0 in its container; raw_exec/exec: the
  // node's address): never without a token.
  const token = options.token ?? randomBytes(24).toString("base64url");
  const images = resolveJobImages(options, driver);
  const constraints = [
    // bubblewrap and the slot isolation need Linux namespaces.
    { attribute: "${attr.kernel.name}", operator: "=", value: "linux" as string | undefined },
    ...(options.constraints ?? []).map((c) => ({ attribute: c.attribute, operator: c.operator ?? "=", value: c.value })),
  ];
  return {
    jobId,
    count,
    slots,
    driver,
    image,
    command,
    commandArgs,
    cpu,
    memoryMb,
    slotMemoryMb,
    slotDiskMb,
    token,
    tokenGenerated: options.token === undefined,
    datacenters: [...datacenters],
    namespace: options.namespace || undefined,
    region: options.region || undefined,
    nodePool: options.nodePool || undefined,
    constraints,
    spreads: (options.spreads ?? []).map(checkSpread),
    privileged: options.privileged ?? false,
    capAdd: options.capAdd ?? [...DOCKER_CAP_ADD],
    securityOpt: options.securityOpt ?? dockerSecurityOpt(),
    tunDevice: options.tunDevice ?? true,
    meta: {
      ...options.meta,
      [META_SLOTPOOL]: "true",
      [META_OWNER]: options.owner ?? defaultOwner(),
      [META_CREATED]: options.created ?? new Date().toISOString(),
      [META_SLOTS]: String(slots),
    },
    serverArgs: [...(options.serverArgs ?? [])],
    ...images,
  };
}


/**
 * Arguments of `slotpool sandbox-server`. Under docker the server listens on the fixed
 * container port that the dynamic host port maps `To`; raw_exec and exec share the host's
 * network, so there it must bind the allocated host address and port itself
 * (`NOMAD_IP_http`, `NOMAD_PORT_http`, which equals the host port when the port has no `To`).
 */
export function sandboxServerArgs(s: SandboxJobSettings): string[] {
  // Host networking: bind only the address Nomad allocated the port on, not every interface.
  const host = s.driver === "docker" ? "0.0.0.0" : "${NOMAD_IP_http}";
  const port = s.driver === "docker" ? String(SANDBOX_SERVER_PORT) : "${NOMAD_PORT_http}";
  return [
    "sandbox-server",
    "--slots",
    String(s.slots),
    "--host",
    host,
    "--port",
    port,
    "--memory-mb",
    String(s.slotMemoryMb),
    "--disk-mb",
    String(s.slotDiskMb),
    ...(isHostMode(s) && !s.serverArgs.includes("--data-dir") ? ["--data-dir", HOST_MODE_DATA_DIR] : []),
    ...imageStoreArgs(s),
    ...s.serverArgs,
  ];
}

/**
 * Each slot's memory and disk bound from the allocation: the allocation less the server's
 * reserve, split evenly; a slot's disk (tmpfs, counted as its memory) is half its share. So
 * slots × share + reserve ≤ the allocation: slots filling their bounds stay inside it.
 * Refuses, with the numbers, when a share would fall below MIN_SLOT_MEMORY_MB.
 */
export function slotShares(slots: number, memoryMb: number, reserveMb = SERVER_RESERVE_MB): { slotMemoryMb: number; slotDiskMb: number } {
  const share = Math.floor((memoryMb - reserveMb) / slots);
  if (share < MIN_SLOT_MEMORY_MB) {
    const need = reserveMb + slots * MIN_SLOT_MEMORY_MB;
    const fit = Math.max(0, Math.floor((memoryMb - reserveMb) / MIN_SLOT_MEMORY_MB));
    throw new SandboxJobOptionError(
      `${slots} slots do not fit in ${memoryMb} MB: the server keeps ${reserveMb} MB and each slot needs at least ${MIN_SLOT_MEMORY_MB} MB ` +
        `(its memory bound, its disk counted in it), so ${slots} slots need ${need} MB; raise memory to ${need} or more, ` +
        (fit > 0 ? `or lower slots to ${fit} or fewer` : `(${memoryMb} MB holds no slot)`),
    );
  }
  return { slotMemoryMb: share, slotDiskMb: Math.floor(share / 2) };
}

/** The driver's `Config` map (keys as in the driver docs; Nomad passes it through untyped). */
export function taskConfig(s: SandboxJobSettings): Record<string, unknown> {
  const args = sandboxServerArgs(s);
  switch (s.driver) {
    case "docker": {
      // The entrypoint is set explicitly so the args below hold the whole command line,
      // whatever the image's own ENTRYPOINT already includes (sandbox-image/Dockerfile has
      // "tini -s -- slotpool sandbox-server --host 0.0.0.0 --port 8080"); tini stays PID 1,
      // reaping the orphans slot commands leave (Node as PID 1 does not).
      const config: Record<string, unknown> = { image: s.image, entrypoint: [...DOCKER_INIT, s.command || "slotpool"], ports: [HTTP_PORT_LABEL], args };
      if (s.privileged) config["privileged"] = true;
      // The same options as `docker run` in sandbox-image/Dockerfile's header (measured there
      // and in test/engines/docker-image.test.ts).
      if (s.capAdd.length) config["cap_add"] = [...s.capAdd];
      if (s.securityOpt.length) config["security_opt"] = [...s.securityOpt];
      // Field names of the docker driver's DockerDevice (drivers/docker/config.go); the cgroup
      // permissions default to "rwm". slirp4netns needs nothing more: it runs as the slot's
      // uid inside the user namespace the server creates for it (no CAP_SYS_PTRACE either).
      if (s.tunDevice) config["devices"] = [{ host_path: TUN_DEVICE, container_path: TUN_DEVICE }];
      return config;
    }
    case "raw_exec":
      // No image: the host's own slotpool (local development), run as the agent's user.
      if (!s.image) return { command: s.command, args: [...s.commandArgs, ...args] };
      // apptainer shares the host network; --bind makes the allocation dir (the server's
      // default data dir is $NOMAD_ALLOC_DIR/data) visible at the same path inside.
      return { command: s.command, args: ["run", "--bind", "${NOMAD_ALLOC_DIR}", s.image, ...args] };
    case "exec":
      return { command: s.command, args: args.slice() };
  }
}

/** The dynamic port: mapped `To` the server port under docker, the host port itself otherwise. */
export function httpPort(s: SandboxJobSettings): { Label: string; To?: number } {
  return s.driver === "docker" ? { Label: HTTP_PORT_LABEL, To: SANDBOX_SERVER_PORT } : { Label: HTTP_PORT_LABEL };
}

/** The Nomad API JSON job (the value of `"Job"` in a register request). */
export function sandboxJob(options: SandboxJobOptions = {}): Record<string, unknown> & { ID: string } {
  return sandboxJobFromSettings(resolveSandboxJobOptions(options));
}

export function sandboxJobFromSettings(s: SandboxJobSettings): Record<string, unknown> & { ID: string } {
  const task: Record<string, unknown> = {
    Name: SANDBOX_TASK,
    Driver: s.driver,
    Config: taskConfig(s),
    Resources: { CPU: s.cpu, MemoryMB: s.memoryMb },
    KillTimeout: KILL_TIMEOUT_NS,
  };
  // The token reaches the task as a plain env var, visible to anyone who may read the job.
  // In production keep it in a Nomad Variable or Vault and render it into the task's env with
  // a `template` block (an edit of the rendered job). The registry credentials likewise.
  task["Env"] = taskEnv(s);
  Object.assign(task, imageStoreTaskJson(s));

  const job: Record<string, unknown> & { ID: string } = {
    ID: s.jobId,
    Name: s.jobId,
    Type: "service",
    Datacenters: [...s.datacenters],
    Constraints: s.constraints.map(constraintJson),
    ...(s.spreads.length ? { Spreads: s.spreads.map(spreadJson) } : {}),
    // MaxParallel 0 means "no update strategy": Nomad then creates no deployment, so a scale
    // call is never refused with 400 "job scaling blocked due to active deployment".
    // shared/nomad-api/README.md l.267 ("What the scale endpoint requires"): "By my reading of
    // structs.UpdateStrategy.IsEmpty (MaxParallel == 0) ... "Update": {"MaxParallel": 0}
    // stops deployments from being created." (untested there; the client still maps the
    // 400 to NomadScaleBlockedError should a deployment exist anyway).
    Update: { MaxParallel: 0 },
    Meta: { ...s.meta },
    TaskGroups: [
      {
        Name: SANDBOX_GROUP,
        Count: s.count,
        Networks: [{ DynamicPorts: [httpPort(s)] }],
        RestartPolicy: { ...RESTART_POLICY },
        ReschedulePolicy: { ...RESCHEDULE_POLICY },
        ...imageStoreGroupJson(s),
        Tasks: hasCleanupTask(s) ? [task, cleanupTaskJson()] : [task],
      },
    ],
  };
  if (s.namespace) job["Namespace"] = s.namespace;
  if (s.region) job["Region"] = s.region;
  if (s.nodePool) job["NodePool"] = s.nodePool;
  return job;
}


function constraintJson(c: { attribute: string; operator: string; value: string | undefined }): Record<string, string> {
  const out: Record<string, string> = { LTarget: c.attribute, Operand: c.operator };
  if (c.value !== undefined) out["RTarget"] = c.value;
  return out;
}

function spreadJson(sp: JobSpread): Record<string, unknown> {
  const out: Record<string, unknown> = { Attribute: sp.attribute, Weight: sp.weight ?? 50 };
  if (sp.targets?.length) out["SpreadTarget"] = sp.targets.map((t) => ({ Value: t.value, Percent: t.percent }));
  return out;
}

function checkSpread(sp: JobSpread): JobSpread {
  if (!sp.attribute) throw new SandboxJobOptionError("a spread needs an attribute, e.g. \"${node.unique.id}\"");
  if (sp.weight !== undefined && (!Number.isInteger(sp.weight) || sp.weight < 0 || sp.weight > 100)) {
    throw new SandboxJobOptionError(`spread weight must be a whole number 0-100, got ${sp.weight}`);
  }
  const total = (sp.targets ?? []).reduce((n, t) => n + t.percent, 0);
  if (total > 100) throw new SandboxJobOptionError(`spread targets of '${sp.attribute}' add up to ${total} %, more than 100`);
  return { ...sp, ...(sp.targets ? { targets: sp.targets.map((t) => ({ ...t })) } : {}) };
}

function whole(name: string, value: number, min: number): number {
  if (!Number.isInteger(value) || value < min) throw new SandboxJobOptionError(`${name} must be a whole number >= ${min}, got ${value}`);
  return value;
}

function defaultOwner(): string {
  let user = "unknown";
  try {
    user = userInfo().username;
  } catch {
    // no passwd entry (containers): keep "unknown"
  }
  return `${user}@${hostname()}`;
}
