import { join } from "node:path";
import { setFlagsFromString } from "node:v8";
import { createLogger } from "../observability/logger.js";
import { DEFAULT_LIMITS } from "../sandbox/isolation/limits.js";
import { SandboxServer } from "../sandbox/http/server.js";
import { PORT_IDLE_TIMEOUT_MS } from "../sandbox/http/port-routes.js";
import { DEFAULT_SLOT_UID_BASE, slotUidBase } from "../host/slot-uid-blocks.js";
import { checkAllowRanges } from "../sandbox/isolation/network.js";
import { DEFAULT_DISK_BYTES } from "../sandbox/workspace/slot-disk.js";
import { mountNamespacePlan, reexecInOwnMountNamespace } from "../host/mount-namespace.js";
import { exposureProblem } from "../http/exposure.js";
import { CliUsageError, boolFlag, intFlag, listFlag, parseFlags, stringFlag } from "./usage.js";
import { DEFAULT_IMAGE_BUDGET_BYTES, DEFAULT_IMAGE_PULL_TIMEOUT_S } from "../sandbox/images/slot-images.js";
import { registryHostProblem } from "../protocol/images.js";

const HELP = `usage: slotpool sandbox-server [options]

Runs the sandbox server: one per container, N isolated slots, each command in bubblewrap.

options:
  --host H                 address to listen on (default 127.0.0.1; the image passes 0.0.0.0)
  --port P                 port (default 8080; 0 picks a free port)
  --slots N                number of slots (default 4)
  --data-dir D             where slot workspaces live (default $NOMAD_ALLOC_DIR/data inside Nomad, else ./data)
  --token T                bearer token required on every route but /health (or env SANDBOX_TOKEN)
  --timeout S              default wall-clock timeout per command, seconds (default ${DEFAULT_LIMITS.defaultTimeoutS})
  --max-timeout S          largest timeout a call may ask for, seconds (default ${DEFAULT_LIMITS.maxTimeoutS})
  --max-processes N        processes per slot (default ${DEFAULT_LIMITS.maxProcesses})
  --max-file-mb N          largest file a command may write, MB (default ${DEFAULT_LIMITS.maxFileBytes / 1024 / 1024})
  --cpu-seconds N          CPU seconds per command (default ${DEFAULT_LIMITS.cpuSeconds})
  --memory-mb N            memory per slot, MB (default ${DEFAULT_LIMITS.memoryBytes / 1024 / 1024})
  --output-cap N           characters of output returned per call, head + tail (default ${DEFAULT_LIMITS.outputCap})
  --max-read-mb N          read_file size cap, MB (default 10)
  --max-write-mb N         write_file size cap, MB (default 10)
  --no-network             calls that do not set allow_network get no network (default: allowed)
  --prewarm-network on|off the network setting each slot's namespace is started ahead for (default: as
                           the calls' default); a client that sends allow_network: false sets off
  --slot-uid-base U        when root, slot i runs as uid/gid U+i (default 20000; inside Nomad a block of
                           its own derived from NOMAD_ALLOC_ID, in [2^29, 2^30): see docs/security-model.md)
  --disk-mb N              bound on everything one slot writes, MB (default ${DEFAULT_DISK_BYTES / 1024 / 1024}). Its workspace (template
                           views included), /tmp and /var/tmp share one tmpfs of N MB per slot (RAM + swap,
                           used only as written), mounted in the server's own namespaces (root: a mount
                           namespace; not root: a user namespace holding one). Where the server may not
                           mount: only /tmp and /var/tmp are bounded (N MB each); /health says which. Keep it
                           below --memory-mb: tmpfs pages count as the slot's memory (see docs/security-model.md)
  --no-disk-workspace      do not bound the workspace (only /tmp and /var/tmp)
  --disk-workspace         bound the workspace (the default; kept for scripts)
  --net-allow-ranges R     comma-separated IPv4 ranges a slot with network on may reach although private
                           (e.g. 10.20.0.0/16); link-local and the host's own addresses stay unreachable
  --allow-unsandboxed      development only: start even where commands cannot be sandboxed (no
                           bubblewrap, or namespaces refused); every result then says UNSANDBOXED
                           (metadata.unsandboxed) and so does /health. Without it such a server refuses
                           to start, naming what is missing and the fix
  --no-sandbox             never use bubblewrap (testing the unsandboxed mode; needs --allow-unsandboxed)
  --no-ptrace              slots may not use ptrace (strace, gdb; allowed by default) nor process_vm_readv/writev
  --no-seccomp             benchmarks only: slot processes run without the seccomp filter (docs/security-model.md);
                           /health (seccomp: "off") and the start-up line say UNFILTERED. Without it a server
                           that cannot build or install the filter refuses to start, naming why
  --no-cgroups             no per-slot cgroups (as a non-root server runs): limits by rlimits only, pause by
                           SIGSTOP/SIGCONT of the slot's processes instead of the freezer cgroup (testing)
  --template-budget-mb N   disk budget of workspace templates, MB; unused ones are evicted LRU above it (default 4096)
  --image-store D          where task images are kept (default <data-dir>/.slotpool/images): blobs, unpacked
                           layers; kept across restarts. Not on overlayfs (a container's own root): give it a
                           volume (docs/images.md)
  --image-budget-mb N      disk budget of task images, MB; unused ones are evicted LRU above it (default 20480)
  --image-pull-timeout S   longest fetch of one image, and unpack of one layer, seconds (default 1800)
  --insecure-registry H    HOST[:PORT] of a registry that may answer plain HTTP (repeatable); every other
                           registry must speak TLS. Credentials: REGISTRY_AUTH_FILE, ~/.docker/config.json, or a
                           Docker-style auth document in SLOTPOOL_REGISTRY_AUTH (never logged)
  --registry-mirror R=M    fetch images of registry R from the registry M instead (HOST[:PORT]; repeatable),
                           e.g. docker.io=mirror.local:5000: Docker Hub's names through an internal mirror
  --volumes-dir D          where volumes live (default <data dir>/volumes): every container of a pool
                           must see the same directory (a Nomad host volume; the local provisioner
                           passes one folder to all its containers)
  --volume-owner UID       as root: the uid (and gid) a volume's files belong to on disk; each slot
                           sees them as its own through an id-mapped view (default 19999)
  --port-idle-timeout-s S  a port tunnel (GET /ports/connect) with no byte either way for S seconds is
                           closed (default 620, as E2B's sandbox proxy)
`;

export async function run(argv: string[]): Promise<number> {
  // Keep V8's young generation at its initial size: under a steady stream of calls it
  // otherwise grows to 2 x 16 MB and stays there, for no throughput gain here (measured:
  // RSS 77 MB instead of 100+ MB after 10k calls; heap in use is ~11 MB either way).
  setFlagsFromString("--semi-space-growth-factor=1");
  const flags = parseFlags(
    argv,
    {
      host: { type: "string" },
      port: { type: "string" },
      slots: { type: "string" },
      "data-dir": { type: "string" },
      token: { type: "string" },
      timeout: { type: "string" },
      "max-timeout": { type: "string" },
      "max-processes": { type: "string" },
      "max-file-mb": { type: "string" },
      "cpu-seconds": { type: "string" },
      "memory-mb": { type: "string" },
      "output-cap": { type: "string" },
      "max-read-mb": { type: "string" },
      "max-write-mb": { type: "string" },
      "no-network": { type: "boolean" },
      "prewarm-network": { type: "string" },
      "slot-uid-base": { type: "string" },
      "no-sandbox": { type: "boolean" },
      "no-seccomp": { type: "boolean" },
      "no-cgroups": { type: "boolean" },
      "no-ptrace": { type: "boolean" },
      "allow-unsandboxed": { type: "boolean" },
      "template-budget-mb": { type: "string" },
      "port-idle-timeout-s": { type: "string" },
      "volumes-dir": { type: "string" },
      "volume-owner": { type: "string" },
      "net-allow-ranges": { type: "string" },
      "disk-mb": { type: "string" },
      "disk-workspace": { type: "boolean" },
      "no-disk-workspace": { type: "boolean" },
      "image-store": { type: "string" },
      "image-budget-mb": { type: "string" },
      "image-pull-timeout": { type: "string" },
      "insecure-registry": { type: "string", multiple: true },
      "registry-mirror": { type: "string", multiple: true },
    },
    HELP,
  );
  if (!flags) return 0;
  if (boolFlag(flags, "disk-workspace") && boolFlag(flags, "no-disk-workspace")) throw new CliUsageError("--disk-workspace and --no-disk-workspace contradict each other");
  // Run in namespaces of our own (root: a mount namespace; not root: a user namespace holding
  // one), so this server may mount the slot disks and template views, and they vanish with
  // it, even on SIGKILL (see src/host/mount-namespace.ts).
  const namespace = mountNamespacePlan();
  if (namespace.run === "reexec") return reexecInOwnMountNamespace(namespace.prefix);
  const MB = 1024 * 1024;
  const host = stringFlag(flags, "host") ?? "127.0.0.1";
  const port = intFlag("port", stringFlag(flags, "port"), 8080, 0, 65535);
  const slots = intFlag("slots", stringFlag(flags, "slots"), 4, 1, 4096);
  const allocDir = process.env["NOMAD_ALLOC_DIR"];
  const dataDir = stringFlag(flags, "data-dir") ?? (allocDir ? join(allocDir, "data") : "./data");
  const token = stringFlag(flags, "token") ?? process.env["SANDBOX_TOKEN"] ?? undefined;
  if (token !== undefined && token.length === 0) throw new CliUsageError("--token must not be empty");
  const exposed = exposureProblem(host, token, "--token T or the environment variable SANDBOX_TOKEN");
  if (exposed) throw new CliUsageError(exposed);
  const base = createLogger({ name: "sandbox-server" });
  // Inside Nomad every line names the allocation.
  const allocId = process.env["NOMAD_ALLOC_ID"];
  const logger = allocId ? base.child({ alloc: allocId }) : base;
  if (namespace.reason && !boolFlag(flags, "no-disk-workspace")) logger.warn({ reason: namespace.reason }, "not in a mount namespace of its own");

  const server = new SandboxServer({
    host,
    port,
    slots,
    dataDir,
    token,
    logger,
    limits: {
      defaultTimeoutS: intFlag("timeout", stringFlag(flags, "timeout"), DEFAULT_LIMITS.defaultTimeoutS, 1),
      maxTimeoutS: intFlag("max-timeout", stringFlag(flags, "max-timeout"), DEFAULT_LIMITS.maxTimeoutS, 1),
      maxProcesses: intFlag("max-processes", stringFlag(flags, "max-processes"), DEFAULT_LIMITS.maxProcesses, 8),
      maxFileBytes: intFlag("max-file-mb", stringFlag(flags, "max-file-mb"), DEFAULT_LIMITS.maxFileBytes / MB, 1) * MB,
      cpuSeconds: intFlag("cpu-seconds", stringFlag(flags, "cpu-seconds"), DEFAULT_LIMITS.cpuSeconds, 1),
      memoryBytes: intFlag("memory-mb", stringFlag(flags, "memory-mb"), DEFAULT_LIMITS.memoryBytes / MB, 16) * MB,
      outputCap: intFlag("output-cap", stringFlag(flags, "output-cap"), DEFAULT_LIMITS.outputCap, 100),
    },
    maxReadBytes: intFlag("max-read-mb", stringFlag(flags, "max-read-mb"), 10, 1) * MB,
    maxWriteBytes: intFlag("max-write-mb", stringFlag(flags, "max-write-mb"), 10, 1) * MB,
    defaultAllowNetwork: !boolFlag(flags, "no-network"),
    ...prewarmNetwork(stringFlag(flags, "prewarm-network")),
    slotUidBase: slotUidBase(stringFlag(flags, "slot-uid-base") === undefined ? undefined : intFlag("slot-uid-base", stringFlag(flags, "slot-uid-base"), DEFAULT_SLOT_UID_BASE, 1000), allocId),
    disableSandbox: boolFlag(flags, "no-sandbox"),
    allowUnsandboxed: boolFlag(flags, "allow-unsandboxed"),
    seccomp: boolFlag(flags, "no-seccomp") ? false : { ptrace: !boolFlag(flags, "no-ptrace") },
    disableCgroups: boolFlag(flags, "no-cgroups"),
    templateBudgetBytes: intFlag("template-budget-mb", stringFlag(flags, "template-budget-mb"), 4096, 1) * MB,
    diskBytes: intFlag("disk-mb", stringFlag(flags, "disk-mb"), DEFAULT_DISK_BYTES / MB, 1) * MB,
    boundWorkspace: !boolFlag(flags, "no-disk-workspace"),
    netAllowRanges: allowRanges(stringFlag(flags, "net-allow-ranges")),
    images: {
      dir: stringFlag(flags, "image-store"),
      budgetBytes: intFlag("image-budget-mb", stringFlag(flags, "image-budget-mb"), DEFAULT_IMAGE_BUDGET_BYTES / MB, 1) * MB,
      pullTimeoutS: intFlag("image-pull-timeout", stringFlag(flags, "image-pull-timeout"), DEFAULT_IMAGE_PULL_TIMEOUT_S, 1),
      insecureRegistries: insecureRegistries(listFlag(flags, "insecure-registry")),
      registryMirrors: registryMirrors(listFlag(flags, "registry-mirror")),
    },
    ...(stringFlag(flags, "volumes-dir") !== undefined ? { volumesDir: stringFlag(flags, "volumes-dir") } : {}),
    ...(stringFlag(flags, "volume-owner") !== undefined ? { volumeOwner: intFlag("volume-owner", stringFlag(flags, "volume-owner"), 19_999, 1, 4_294_967_294) } : {}),
    portIdleTimeoutMs: intFlag("port-idle-timeout-s", stringFlag(flags, "port-idle-timeout-s"), PORT_IDLE_TIMEOUT_MS / 1000, 1, 86_400) * 1000,
  });
  const url = await server.listen();
  // The launcher (src/pool/sandbox-process.ts) waits for this line: it is written whatever
  // SLOTPOOL_LOG_LEVEL says.
  logger.child({}, { level: "info" }).info(
    {
      url,
      slots,
      bwrap_available: server.service.bwrap.available,
      fast_path: server.service.spawnerPath !== null,
      seccomp: server.service.isolation().seccomp,
      ...(server.service.bwrap.filter ? { ptrace: server.service.bwrap.filter.ptrace } : {}),
      cgroups: server.service.cgroups.mode,
      limits: server.service.limitsInForce,
      disk: server.service.disks.mode,
      ...(server.service.disks.reason ? { disk_reason: server.service.disks.reason } : {}),
      internet: server.service.internetAccess ? "slirp4netns" : (server.service.internetReason ?? "none"),
      images: server.service.images.reason === undefined ? "available" : `unavailable: ${server.service.images.reason}`,
      auth: token !== undefined,
      isolation: server.service.isolation().summary,
    },
    "listening",
  );

  // Graceful shutdown (Nomad sends SIGTERM, then SIGKILL after its kill_timeout).
  await new Promise<void>((resolve) => {
    let stopping = false;
    const stop = (signal: string): void => {
      if (stopping) return;
      stopping = true;
      logger.info({ signal }, "shutting down");
      const hard = setTimeout(() => {
        logger.warn("shutdown took too long; exiting");
        resolve();
      }, 4_000);
      hard.unref();
      server.close().then(
        () => {
          clearTimeout(hard);
          resolve();
        },
        () => resolve(),
      );
    };
    process.once("SIGTERM", () => stop("SIGTERM"));
    process.once("SIGINT", () => stop("SIGINT"));
  });
  logger.info("stopped");
  logger.flush();
  return 0;
}

/** `--registry-mirror REGISTRY=MIRROR` values, each checked. */
export function registryMirrors(values: string[]): Record<string, string> {
  const out: Record<string, string> = {};
  for (const v of values) {
    const [from, to, ...rest] = v.split("=");
    const problem = !from || !to || rest.length > 0 ? `'${v}' is not REGISTRY=MIRROR (e.g. docker.io=127.0.0.1:5000)` : (registryHostProblem(from) ?? registryHostProblem(to));
    if (problem) throw new CliUsageError(`--registry-mirror: ${problem}`);
    out[from!] = to!;
  }
  return out;
}

/** `--insecure-registry HOST[:PORT]` values, each checked. */
export function insecureRegistries(values: string[]): string[] {
  return values.map((v) => {
    const problem = registryHostProblem(v);
    if (problem) throw new CliUsageError(`--insecure-registry: ${problem}`);
    return v;
  });
}

function allowRanges(flag: string | undefined): string[] {
  if (!flag) return [];
  try {
    return checkAllowRanges(flag.split(",").filter((r) => r.trim() !== ""));
  } catch (err) {
    throw new CliUsageError(`--net-allow-ranges: ${err instanceof Error ? err.message : String(err)}`);
  }
}

/** `--prewarm-network on|off` → the service option (absent: the calls' default network setting). */
function prewarmNetwork(value: string | undefined): { prewarmNetwork?: boolean } {
  if (value === undefined) return {};
  if (value !== "on" && value !== "off") throw new CliUsageError(`--prewarm-network takes on or off, got ${JSON.stringify(value)}`);
  return { prewarmNetwork: value === "on" };
}
