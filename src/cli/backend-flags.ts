import { ToolBackendConfigSchema, type ToolBackendConfig, type ToolBackendConfigInput } from "../executor/backend-config.js";
import { CliUsageError, intFlag, stringFlag, type parseFlags } from "./usage.js";

type Flags = NonNullable<ReturnType<typeof parseFlags>>;
export type BackendFlagTable = Readonly<Record<string, keyof ToolBackendConfigInput>>;

/** The pool's flags, shared by every server that holds a pool (executor-server, e2b-server). */
export const POOL_FLAGS = {
  provisioner: "provisioner",
  "slots-per-container": "slotsPerContainer",
  "min-containers": "minContainers",
  "max-containers": "maxContainers",
  "idle-timeout-ms": "idleTimeoutMs",
  "acquire-timeout-ms": "acquireTimeoutMs",
  "data-dir": "dataDir",
  image: "sandboxImage",
  "job-id": "nomadJobId",
  driver: "nomadDriver",
  datacenters: "nomadDatacenters",
  namespace: "nomadNamespace",
  "node-pool": "nomadNodePool",
} as const satisfies BackendFlagTable;

const NUMERIC = new Set(["slots-per-container", "min-containers", "max-containers", "idle-timeout-ms", "acquire-timeout-ms", "batch-window-ms", "max-batch-size", "default-timeout"]);
const LISTS = new Set(["datacenters"]);

/** parseArgs options for a flag table: every one takes a string. */
export function backendFlagOptions(table: BackendFlagTable): Record<string, { type: "string" }> {
  return Object.fromEntries(Object.keys(table).map((f) => [f, { type: "string" as const }]));
}

/**
 * The backend config the flags of `table` describe, over `input` (fields the caller set
 * otherwise); its defaults and ranges are the schema's, and a bad value gets an error naming
 * its flag.
 */
export function backendConfigFromFlags(flags: Flags, table: BackendFlagTable, input: Record<string, unknown> = {}): ToolBackendConfig {
  for (const [flag, field] of Object.entries(table)) {
    const raw = stringFlag(flags, flag);
    if (raw === undefined) continue;
    input[field] = NUMERIC.has(flag) ? intFlag(flag, raw, 0, Number.MIN_SAFE_INTEGER) : LISTS.has(flag) ? raw.split(",").map((d) => d.trim()) : raw;
  }
  const parsed = ToolBackendConfigSchema.safeParse(input);
  if (parsed.success) return parsed.data;
  const flagOf = (field: string) => Object.entries(table).find(([, f]) => f === field)?.[0] ?? field;
  const problems = parsed.error.issues.map((i) => {
    const field = String(i.path[0] ?? "");
    return `--${flagOf(field)} ${JSON.stringify(input[field])}: ${i.message}`;
  });
  throw new CliUsageError(problems.join("; "));
}
