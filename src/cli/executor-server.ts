import { ExecutorServer } from "../executor/executor-server.js";
import { ToolExecutor } from "../executor/tool-executor.js";
import { createLogger } from "../observability/logger.js";
import { MetricsRegistry } from "../observability/metrics.js";
import type { Provisioner } from "../pool/provisioner.js";
import { SlotPool } from "../pool/slot-pool.js";
import { CliUsageError, boolFlag, intFlag, parseFlags, stringFlag } from "./usage.js";

const HELP = `usage: slotpool executor-server [options]

Runs the tool executor as an HTTP service (the original's executor API), so envs in any
language can run tool calls in slotpool slots.

options:
  --host H                   address to listen on (default 127.0.0.1)
  --port P                   port (default 9001; 0 picks a free port)
  --token T                  bearer token required on every route but /health (or env TOOL_EXECUTOR_TOKEN)
  --provisioner local|nomad  where sandbox containers run (default local)
  --slots-per-container N    slots per container (default 10)
  --min-containers N         containers kept running (default 1)
  --max-containers N         most containers (default 10)
  --idle-timeout-ms MS       how long a surplus of containers lasts before they are drained (default 60000)
  --acquire-timeout-ms MS    how long a trajectory's first call waits for a slot (default 30000)
  --data-dir D               local provisioner: where workspaces live (default: a temp dir)
  --image IMG                nomad provisioner: sandbox image (default: the job builder's)
  --job-id ID                nomad provisioner: sandbox job id
  --driver D                 nomad provisioner: docker|raw_exec|exec
  --tool-server-url URL      ToolServer hosting external tools
  --tool-server-token T      its bearer token (or env TOOL_EXECUTOR_TOOL_SERVER_TOKEN)
  --no-network               sandbox commands run without network
  --require-sandbox          refuse to run commands when bubblewrap is unavailable
  --batch-window-ms MS       executor batch window (default 0: calls issued together still go together)
  --max-batch-size N         executor batch size (default 200)
  --default-timeout S        timeout of calls that name none, seconds (default 120, max 600)

Nomad settings come from NOMAD_ADDR, NOMAD_TOKEN, NOMAD_NAMESPACE, NOMAD_REGION, NOMAD_CACERT, ...
`;

export async function run(argv: string[]): Promise<number> {
  const flags = parseFlags(
    argv,
    {
      host: { type: "string" },
      port: { type: "string" },
      token: { type: "string" },
      provisioner: { type: "string" },
      "slots-per-container": { type: "string" },
      "min-containers": { type: "string" },
      "max-containers": { type: "string" },
      "idle-timeout-ms": { type: "string" },
      "acquire-timeout-ms": { type: "string" },
      "data-dir": { type: "string" },
      image: { type: "string" },
      "job-id": { type: "string" },
      driver: { type: "string" },
      "tool-server-url": { type: "string" },
      "tool-server-token": { type: "string" },
      "no-network": { type: "boolean" },
      "require-sandbox": { type: "boolean" },
      "batch-window-ms": { type: "string" },
      "max-batch-size": { type: "string" },
      "default-timeout": { type: "string" },
    },
    HELP,
  );
  if (!flags) return 0;
  const host = stringFlag(flags, "host") ?? "127.0.0.1";
  const port = intFlag("port", stringFlag(flags, "port"), 9001, 0, 65535);
  const token = stringFlag(flags, "token") ?? (process.env["TOOL_EXECUTOR_TOKEN"] || undefined);
  const provisionerKind = stringFlag(flags, "provisioner") ?? "local";
  if (provisionerKind !== "local" && provisionerKind !== "nomad") {
    throw new CliUsageError(`--provisioner must be 'local' or 'nomad', got '${provisionerKind}'`);
  }
  const slotsPerContainer = intFlag("slots-per-container", stringFlag(flags, "slots-per-container"), 10, 1, 4096);
  const minContainers = intFlag("min-containers", stringFlag(flags, "min-containers"), 1, 0, 100_000);
  const maxContainers = intFlag("max-containers", stringFlag(flags, "max-containers"), 10, 1, 100_000);
  if (minContainers > maxContainers) throw new CliUsageError(`--min-containers (${minContainers}) must not exceed --max-containers (${maxContainers})`);
  const idleTimeoutMs = intFlag("idle-timeout-ms", stringFlag(flags, "idle-timeout-ms"), 60_000, 0);
  const acquireTimeoutMs = intFlag("acquire-timeout-ms", stringFlag(flags, "acquire-timeout-ms"), 30_000, 1);
  const toolServerUrl = stringFlag(flags, "tool-server-url");
  const toolServerToken = stringFlag(flags, "tool-server-token") ?? (process.env["TOOL_EXECUTOR_TOOL_SERVER_TOKEN"] || undefined);
  const batchWindowMs = intFlag("batch-window-ms", stringFlag(flags, "batch-window-ms"), 0, 0, 1000);
  const maxBatchSize = intFlag("max-batch-size", stringFlag(flags, "max-batch-size"), 200, 1);
  const defaultTimeoutS = intFlag("default-timeout", stringFlag(flags, "default-timeout"), 120, 1, 600);

  const logger = createLogger({ name: "executor-server" });
  const metrics = new MetricsRegistry();
  const provisioner = await createProvisioner(provisionerKind, {
    slotsPerContainer,
    baseDir: stringFlag(flags, "data-dir"),
    image: stringFlag(flags, "image"),
    jobId: stringFlag(flags, "job-id"),
    driver: stringFlag(flags, "driver"),
    logger,
  });
  const pool = new SlotPool({ provisioner, slotsPerContainer, minContainers, maxContainers, idleTimeoutMs, acquireTimeoutMs, logger, metrics });
  const executor = new ToolExecutor({
    pool,
    logger,
    metrics,
    config: {
      batchWindowMs,
      maxBatchSize,
      defaultTimeoutS,
      acquireTimeoutMs,
      allowNetwork: !boolFlag(flags, "no-network"),
      requireSandbox: boolFlag(flags, "require-sandbox"),
      toolServerUrl,
      toolServerToken,
    },
  });
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

  try {
    await pool.start();
    await executor.start();
    const url = await server.listen(port, host);
    logger.info({ url, provisioner: provisionerKind, slotsPerContainer, minContainers, maxContainers, auth: token !== undefined, toolServer: toolServerUrl ?? null }, "listening");
    const signal = await new Promise<NodeJS.Signals>((resolve) => {
      let seen = 0;
      const onSignal = (sig: NodeJS.Signals) => {
        // A second signal while slots are being released means "stop now".
        if (++seen > 1) {
          logger.warn({ signal: sig }, "second signal: exiting without waiting for slots to be released");
          logger.flush();
          process.exit(130);
        }
        resolve(sig);
      };
      process.on("SIGTERM", onSignal);
      process.on("SIGINT", onSignal);
    });
    logger.info({ signal }, "shutting down: releasing every slot");
    await shutdown();
    logger.info("stopped");
    return 0;
  } catch (err) {
    await shutdown().catch(() => undefined);
    throw err;
  } finally {
    logger.flush();
  }
}

interface ProvisionerFlags {
  slotsPerContainer: number;
  baseDir?: string;
  image?: string;
  jobId?: string;
  driver?: string;
  logger: ReturnType<typeof createLogger>;
}

/** Loaded on demand so the local path never loads the Nomad client, and vice versa. */
async function createProvisioner(kind: "local" | "nomad", o: ProvisionerFlags): Promise<Provisioner> {
  if (kind === "local") {
    const { LocalProvisioner } = await import("../pool/local-provisioner.js");
    return new LocalProvisioner({ slotsPerContainer: o.slotsPerContainer, logger: o.logger.child({ component: "local" }), ...(o.baseDir ? { baseDir: o.baseDir } : {}) });
  }
  if (o.driver !== undefined && !["docker", "raw_exec", "exec"].includes(o.driver)) {
    throw new CliUsageError(`--driver must be docker, raw_exec or exec, got '${o.driver}'`);
  }
  const { NomadProvisioner } = await import("../pool/nomad-provisioner.js");
  return new NomadProvisioner({
    slotsPerContainer: o.slotsPerContainer,
    logger: o.logger.child({ component: "nomad" }),
    job: {
      ...(o.image ? { image: o.image } : {}),
      ...(o.jobId ? { jobId: o.jobId } : {}),
      ...(o.driver ? { driver: o.driver as "docker" | "raw_exec" | "exec" } : {}),
    },
  });
}
