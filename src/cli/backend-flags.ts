import { ToolBackendConfigSchema, type ToolBackendConfig } from "../executor/backend-config.js";
import { getConfigPath, setConfigPath } from "./config-path.js";
import { CliUsageError, intFlag, listFlag, stringFlag, type parseFlags } from "./usage.js";
import { registryHostProblem } from "../protocol/images.js";

type Flags = NonNullable<ReturnType<typeof parseFlags>>;
/** Flag name → the field it sets, as a path into the backend config's sections ("pool.slotsPerContainer"). */
export type BackendFlagTable = Readonly<Record<string, `pool.${string}` | `executor.${string}` | `images.${string}`>>;

/** The pool's flags, shared by every server that holds a pool (executor-server, e2b-server). */
export const POOL_FLAGS = {
  provisioner: "pool.provisioner",
  "slots-per-container": "pool.slotsPerContainer",
  "min-containers": "pool.minContainers",
  "max-containers": "pool.maxContainers",
  "idle-timeout-ms": "pool.idleTimeoutMs",
  "acquire-timeout-ms": "pool.acquireTimeoutMs",
  "data-dir": "pool.dataDir",
  image: "pool.nomad.image",
  "job-id": "pool.nomad.jobId",
  driver: "pool.nomad.driver",
  datacenters: "pool.nomad.datacenters",
  namespace: "pool.nomad.namespace",
  "node-pool": "pool.nomad.nodePool",
  cpu: "pool.nomad.cpu",
  "memory-mb": "pool.nomad.memoryMb",
  "image-disk-mb": "pool.nomad.imageDiskMb",
  "insecure-registry": "images.insecureRegistries",
  "registry-mirror": "images.registryMirrors",
} as const satisfies BackendFlagTable;

/** The pool flags' help lines about task images, shared by every server that holds a pool. */
export const IMAGE_FLAGS_HELP = `  --insecure-registry H:P    a registry of task images that may answer plain HTTP (repeatable); every
                             sandbox server the pool starts gets it (docs/images.md). Registry
                             credentials: SLOTPOOL_REGISTRY_AUTH or REGISTRY_AUTH_FILE in this
                             environment (never a flag)
  --registry-mirror R=M      fetch task images of registry R from registry M (repeatable; e.g.
                             docker.io=mirror.local:5000): every sandbox server the pool starts gets it
  --image-disk-mb MB         nomad provisioner: each container's sticky ephemeral disk for task images
                             (default 5120; the store's budget is 80 % of it)`;

const NUMERIC = new Set(["cpu", "memory-mb", "image-disk-mb", "slots-per-container", "min-containers", "max-containers", "idle-timeout-ms", "acquire-timeout-ms", "batch-window-ms", "max-batch-size", "default-timeout"]);
const LISTS = new Set(["datacenters"]);
/** Flags given once per value (`--insecure-registry A --insecure-registry B`): their field is the list of all. */
const REPEATED = new Set(["insecure-registry", "registry-mirror"]);

/**
 * `--insecure-registry H:P` (repeatable) over a config's own list (`listed`, e.g. from
 * --config): both count. Undefined when the flag is not given; a bad value is a usage error.
 */
export function insecureRegistriesFlag(flags: Flags, listed: unknown): string[] | undefined {
  const given = listFlag(flags, "insecure-registry");
  if (given.length === 0) return undefined;
  for (const h of given) {
    const problem = registryHostProblem(h);
    if (problem) throw new CliUsageError(`--insecure-registry: ${problem}`);
  }
  return [...new Set([...(Array.isArray(listed) ? listed.map(String) : []), ...given])];
}

/** parseArgs options for a flag table: every one takes a string (a repeated one, several). */
export function backendFlagOptions(table: BackendFlagTable): Record<string, { type: "string"; multiple?: true }> {
  return Object.fromEntries(Object.keys(table).map((f) => [f, REPEATED.has(f) ? { type: "string" as const, multiple: true as const } : { type: "string" as const }]));
}

/**
 * The backend config the flags of `table` describe, over `input` (fields the caller set
 * otherwise), parsed here at the edge; its defaults and ranges are the sections' schemas, and
 * a bad value gets an error naming its flag.
 */
export function backendConfigFromFlags(flags: Flags, table: BackendFlagTable, input: Record<string, unknown> = {}): ToolBackendConfig {
  for (const [flag, path] of Object.entries(table)) {
    if (REPEATED.has(flag)) {
      const all = listFlag(flags, flag);
      if (all.length > 0) setConfigPath(input, path, all);
      continue;
    }
    const raw = stringFlag(flags, flag);
    if (raw === undefined) continue;
    setConfigPath(input, path, NUMERIC.has(flag) ? intFlag(flag, raw, 0, Number.MIN_SAFE_INTEGER) : LISTS.has(flag) ? raw.split(",").map((d) => d.trim()) : raw);
  }
  const parsed = ToolBackendConfigSchema.safeParse(input);
  if (parsed.success) return parsed.data;
  const problems = parsed.error.issues.map((i) => {
    const path = i.path.map(String).join(".");
    // The flag whose field holds the bad value (a list's element: the list's flag).
    const hit = Object.entries(table).find(([, p]) => path === p || path.startsWith(`${p}.`));
    return hit ? `--${hit[0]} ${JSON.stringify(getConfigPath(input, hit[1]))}: ${i.message}` : `${path}: ${i.message}`;
  });
  throw new CliUsageError(problems.join("; "));
}
