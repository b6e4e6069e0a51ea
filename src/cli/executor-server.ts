import { ToolBackendConfigSchema } from "../executor/backend-config.js";
import { IMAGE_FLAGS_HELP, POOL_FLAGS, backendConfigFromFlags, backendFlagOptions, type BackendFlagTable } from "./backend-flags.js";
import { serveUntilStopped } from "./stop-signal.js";
import { ExecutorServer } from "../executor/executor-server.js";
import { createToolBackend } from "../executor/tool-backend.js";
import { createLogger } from "../observability/logger.js";
import { MetricsRegistry } from "../observability/metrics.js";
import { exposureProblem } from "../http/exposure.js";
import { CliUsageError, boolFlag, intFlag, parseFlags, stringFlag } from "./usage.js";

/** The flags that set backend fields; their defaults and ranges are the schema's (ToolBackendConfigSchema). */
const BACKEND_FLAGS = {
  ...POOL_FLAGS,
  "tool-server-url": "executor.toolServerUrl",
  "tool-server-token": "executor.toolServerToken",
  "batch-window-ms": "executor.batchWindowMs",
  "max-batch-size": "executor.maxBatchSize",
  "default-timeout": "executor.defaultTimeoutS",
} as const satisfies BackendFlagTable;

const { pool: D, executor: E } = ToolBackendConfigSchema.parse({});

const HELP = `usage: slotpool executor-server [options]

Runs the tool executor as an HTTP service (slotpool's executor API: docs/executor.md), so envs in any
language can run tool calls in slotpool slots.

options:
  --host H                   address to listen on (default 127.0.0.1)
  --port P                   port (default 9001; 0 picks a free port)
  --token T                  bearer token required on every route but /health (or env TOOL_EXECUTOR_TOKEN)
  --provisioner local|nomad  where sandbox containers run (default ${D.provisioner})
  --slots-per-container N    slots per container (default ${D.slotsPerContainer})
  --min-containers N         containers kept running (default ${D.minContainers})
  --max-containers N         most containers (default ${D.maxContainers})
  --idle-timeout-ms MS       how long a surplus of containers lasts before they are drained (default ${D.idleTimeoutMs})
  --acquire-timeout-ms MS    how long a trajectory's first call waits for a slot (default ${D.acquireTimeoutMs})
  --data-dir D               local provisioner: where workspaces live (default: a temp dir)
  --image IMG                nomad provisioner: sandbox image (default: the job builder's)
  --job-id ID                nomad provisioner: sandbox job id
  --driver D                 nomad provisioner: docker|raw_exec|exec (raw_exec without --image: this
                             host's own slotpool, for local development)
  --datacenters DC[,DC...]   nomad provisioner: datacenters of the job (default dc1, every agent's default)
  --namespace NS             nomad provisioner: the job's namespace (default NOMAD_NAMESPACE, else "default")
  --node-pool P              nomad provisioner: the job's node pool (Nomad >= 1.6)
  --cpu MHZ                  nomad provisioner: CPU per container (default 1000)
  --memory-mb MB             nomad provisioner: memory per container (default 128 + 224 x slots)
${IMAGE_FLAGS_HELP}
  --tool-server-url URL      ToolServer hosting external tools
  --tool-server-token T      its bearer token (or env TOOL_EXECUTOR_TOOL_SERVER_TOKEN)
  --allow-network            sandbox commands may reach the network (default: ${E.allowNetwork ? "on" : "off"})
  --no-network               sandbox commands run without network (the default; kept for scripts)
  --require-sandbox          refuse to run commands when bubblewrap is unavailable
  --batch-window-ms MS       executor batch window (default ${E.batchWindowMs}: calls issued together still go together)
  --max-batch-size N         executor batch size (default ${E.maxBatchSize})
  --default-timeout S        timeout of calls that name none, seconds (default ${E.defaultTimeoutS}, max 600)

Defaults are the tool backend's, shared with env configs (docs/executor.md, "One backend").
Nomad settings come from NOMAD_ADDR, NOMAD_TOKEN, NOMAD_NAMESPACE, NOMAD_REGION, NOMAD_CACERT, ...
`;

/** The backend config the flags describe; a bad value gets an error naming its flag. */
function backendConfig(flags: NonNullable<ReturnType<typeof parseFlags>>) {
  const executor: Record<string, unknown> = { toolServerToken: process.env["TOOL_EXECUTOR_TOOL_SERVER_TOKEN"] || undefined };
  if (boolFlag(flags, "allow-network") && boolFlag(flags, "no-network")) throw new CliUsageError("--allow-network and --no-network contradict each other");
  if (boolFlag(flags, "allow-network")) executor["allowNetwork"] = true;
  if (boolFlag(flags, "no-network")) executor["allowNetwork"] = false;
  if (boolFlag(flags, "require-sandbox")) executor["requireSandbox"] = true;
  const input: Record<string, unknown> = { executor };
  return backendConfigFromFlags(flags, BACKEND_FLAGS, input);
}

export async function run(argv: string[]): Promise<number> {
  const flags = parseFlags(
    argv,
    {
      host: { type: "string" },
      port: { type: "string" },
      token: { type: "string" },
      ...backendFlagOptions(BACKEND_FLAGS),
      "allow-network": { type: "boolean" },
      "no-network": { type: "boolean" },
      "require-sandbox": { type: "boolean" },
    },
    HELP,
  );
  if (!flags) return 0;
  const host = stringFlag(flags, "host") ?? "127.0.0.1";
  const port = intFlag("port", stringFlag(flags, "port"), 9001, 0, 65535);
  const token = stringFlag(flags, "token") ?? (process.env["TOOL_EXECUTOR_TOKEN"] || undefined);
  const exposed = exposureProblem(host, token, "--token T or the environment variable TOOL_EXECUTOR_TOKEN");
  if (exposed) throw new CliUsageError(exposed);
  const config = backendConfig(flags);

  const logger = createLogger({ name: "executor-server" });
  const metrics = new MetricsRegistry();
  let backend: Awaited<ReturnType<typeof createToolBackend>>;
  try {
    backend = await createToolBackend(config, { logger, metrics });
  } finally {
    logger.flush();
  }
  const { pool, executor } = backend;
  const server = new ExecutorServer({ executor, pool, token, logger, metrics });

  let stopping: Promise<void> | undefined;
  const shutdown = () =>
    (stopping ??= (async () => {
      // Stop taking requests, release every slot (which ends calls still running), then the pool.
      const serverClosed = server.close();
      await executor.close();
      await serverClosed;
      await pool.stop();
    })());

  return serveUntilStopped({
    logger,
    listen: () => server.listen(port, host),
    listening: (url) => ({ url, provisioner: config.pool.provisioner, slotsPerContainer: config.pool.slotsPerContainer, minContainers: config.pool.minContainers, maxContainers: config.pool.maxContainers, auth: token !== undefined, toolServer: config.executor.toolServerUrl ?? null }),
    stopping: "releasing every slot",
    shutdown,
  });
}
