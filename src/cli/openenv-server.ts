/**
 * `slotpool openenv-server ENV`: serve an AgentEnv as an OpenEnv environment (WebSocket /ws,
 * HTTP reset/step/state/schema/metadata/health), its tools over MCP (/mcp) and rollouts on a
 * trainer's model (POST /run). See docs/trainers.md.
 */
import { readFile } from "node:fs/promises";
import { EnvConfigError } from "../env/errors.js";
import { exposureProblem } from "../http/exposure.js";
import { createLogger } from "../observability/logger.js";
import { ServerLimitsSchema, type ServerLimits } from "../openenv/limits.js";
import { OpenEnvError } from "../openenv/errors.js";
import { ModelUrlPolicy } from "../openenv/model-url.js";
import { OpenEnvServer } from "../openenv/server.js";
import { registerOpenEnvMetrics } from "../openenv/status.js";
import { MetricsRegistry } from "../observability/metrics.js";
import { serveRunMetrics } from "./metrics-endpoint.js";
import { IMAGE_FLAGS_HELP, POOL_FLAGS, backendConfigFromFlags, backendFlagOptions } from "./backend-flags.js";
import { getConfigPath, setConfigPath } from "./config-path.js";
import { loadEnvClass } from "./run-env.js";
import { serveUntilStopped } from "./stop-signal.js";
import { CliUsageError, intFlag, parseFlags, stringFlag, type ParsedFlags } from "./usage.js";

const HELP = `usage: slotpool openenv-server ENV [options]

Serves the env ENV (a module whose default export is an AgentEnv subclass) as an OpenEnv
environment: each WebSocket session at /ws is one episode in one slot of its own (reset takes
the next item, or the one its seed / episode_id selects; call_tool runs the env's tools in the
slot; the submit tool or the turn limit ends it with computeReward's reward). MCP clients get
the same tools at /mcp (streamable HTTP; one session = one slot), and POST /run runs one
rollout of the env's own agent loop on the model endpoint the request names.
See docs/trainers.md.

options:
  --host H                     address to listen on (default 127.0.0.1)
  --port P                     port (default 8000; 0 picks a free port)
  --token T                    bearer token every route but /health asks for (or env OPENENV_TOKEN);
                               required when --host is not a loopback address
  --config FILE                JSON object of env config fields (maxTurns, tools, executor, ...)
  --session-idle-timeout-s S   a session idle this long loses its episode and slot (default 600)
  --metrics-port N             serve GET /metrics (sessions, episodes by outcome, mean reward, slots) on
                               127.0.0.1:N (0: any free port, printed); GET /status on the server says the same
  --model-url-allow PREFIX     a model endpoint POST /run may call (scheme, host, port, path prefix;
                               repeatable). None: /run is refused (it would POST wherever a client says)
  --run-timeout-s S            longest a /run may take, its request's timeout_ms included (default 600)
  --model-answer-max-bytes N   largest model answer /run reads (default 16777216)
  --max-seed N                 largest seed (item number) a reset, step or /run may select (default 100000)
  --max-sessions N             WebSocket connections plus MCP sessions at once (default 1024)
  --max-message-bytes N        largest WebSocket message or HTTP body (default 16777216)
  --frame-budget-bytes N       WebSocket messages and bodies in flight over all clients (default 268435456)
  --episode-secret S           key the server's episode ids are signed with (or env OPENENV_EPISODE_SECRET;
                               default: random, so ids replay on this server process only)
  --provisioner local|nomad    where sandbox containers run (default local)
  --slots-per-container N      slots per container
  --min-containers N           containers kept running
  --max-containers N           most containers (sessions beyond the slots wait, then get CAPACITY_REACHED)
  --idle-timeout-ms MS         how long a surplus of containers lasts before they are drained
  --acquire-timeout-ms MS      how long a reset waits for a free slot before CAPACITY_REACHED
  --data-dir D                 local provisioner: where workspaces live (default: a temp dir)
  --image IMG                  nomad provisioner: sandbox image (default: the job builder's)
  --job-id ID                  nomad provisioner: sandbox job id
  --driver D                   nomad provisioner: docker|raw_exec|exec
  --datacenters DC[,DC...]     nomad provisioner: datacenters of the job (default dc1)
  --namespace NS               nomad provisioner: the job's namespace (default NOMAD_NAMESPACE, else "default")
  --node-pool P                nomad provisioner: the job's node pool (Nomad >= 1.6)
${IMAGE_FLAGS_HELP}

The --config file's "openenv" object may set the same bounds by their names in the docs
(modelUrlAllow, runTimeoutMs, maxSeed, maxSessions, ...); flags win over it.

Nomad settings come from NOMAD_ADDR, NOMAD_TOKEN, NOMAD_NAMESPACE, NOMAD_REGION, NOMAD_CACERT, ...
`;

/** The server's bounds: the config file's `openenv` section, then the flags over it. */
function serverLimits(flags: ParsedFlags, section: unknown): Partial<ServerLimits> {
  const parsed = ServerLimitsSchema.safeParse(section ?? {});
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    throw new CliUsageError(`--config: openenv.${issue.path.join(".") || "(section)"}: ${issue.message}`);
  }
  const limits: Partial<ServerLimits> = { ...parsed.data };
  const allow = flags.values["model-url-allow"];
  if (Array.isArray(allow) && allow.length > 0) limits.modelUrlAllow = allow.map(String);
  const int = (flag: string, key: "maxSeed" | "maxSessions" | "maxMessageBytes" | "frameBudgetBytes" | "modelAnswerMaxBytes", min: number) => {
    const v = stringFlag(flags, flag);
    if (v !== undefined) limits[key] = intFlag(flag, v, 0, min);
  };
  int("max-seed", "maxSeed", 0);
  int("max-sessions", "maxSessions", 1);
  int("max-message-bytes", "maxMessageBytes", 1024);
  int("frame-budget-bytes", "frameBudgetBytes", 1024);
  int("model-answer-max-bytes", "modelAnswerMaxBytes", 1024);
  const runS = stringFlag(flags, "run-timeout-s");
  if (runS !== undefined) limits.runTimeoutMs = intFlag("run-timeout-s", runS, 600, 1, 86_400) * 1000;
  const secret = stringFlag(flags, "episode-secret") ?? (process.env["OPENENV_EPISODE_SECRET"] || undefined);
  if (secret !== undefined) {
    if (secret.length < 16) throw new CliUsageError("--episode-secret must be at least 16 characters");
    limits.episodeSecret = secret;
  }
  return limits;
}

/** The env config: --config FILE, then the pool flags over its `pool` section (checked by the backend's schema, naming the flag). */
async function envConfig(flags: ParsedFlags): Promise<Record<string, unknown>> {
  let config: Record<string, unknown> = {};
  const file = stringFlag(flags, "config");
  if (file) {
    let parsed: unknown;
    try {
      parsed = JSON.parse(await readFile(file, "utf8"));
    } catch (err) {
      throw new CliUsageError(`--config ${file}: ${(err as Error).message}`);
    }
    if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed)) throw new CliUsageError(`--config ${file}: must hold a JSON object of env config fields`);
    config = parsed as Record<string, unknown>;
  }
  const fromFlags = backendConfigFromFlags(flags, POOL_FLAGS);
  for (const [flag, path] of Object.entries(POOL_FLAGS)) {
    if (stringFlag(flags, flag) !== undefined) setConfigPath(config, path, getConfigPath(fromFlags as unknown as Record<string, unknown>, path));
  }
  return config;
}

export async function run(argv: string[]): Promise<number> {
  const flags = parseFlags(
    argv,
    {
      host: { type: "string" },
      port: { type: "string" },
      token: { type: "string" },
      config: { type: "string" },
      "session-idle-timeout-s": { type: "string" },
      "model-url-allow": { type: "string", multiple: true },
      "run-timeout-s": { type: "string" },
      "model-answer-max-bytes": { type: "string" },
      "max-seed": { type: "string" },
      "max-sessions": { type: "string" },
      "max-message-bytes": { type: "string" },
      "frame-budget-bytes": { type: "string" },
      "episode-secret": { type: "string" },
      "metrics-port": { type: "string" },
      ...backendFlagOptions(POOL_FLAGS),
    },
    HELP,
    true,
  );
  if (!flags) return 0;
  const [spec, ...extra] = flags.positionals;
  if (!spec) throw new CliUsageError(`missing ENV (a module path whose default export is an AgentEnv subclass)\n\n${HELP}`);
  if (extra.length) throw new CliUsageError(`unexpected arguments: ${extra.join(" ")}`);
  const host = stringFlag(flags, "host") ?? "127.0.0.1";
  const port = intFlag("port", stringFlag(flags, "port"), 8000, 0, 65535);
  const token = stringFlag(flags, "token") ?? (process.env["OPENENV_TOKEN"] || undefined);
  const exposed = exposureProblem(host, token, "--token T or the environment variable OPENENV_TOKEN");
  if (exposed) throw new CliUsageError(exposed);
  const idleTimeoutMs = intFlag("session-idle-timeout-s", stringFlag(flags, "session-idle-timeout-s"), 600, 1, 7 * 86_400) * 1000;
  const metricsFlag = stringFlag(flags, "metrics-port");
  const metricsPort = metricsFlag !== undefined ? intFlag("metrics-port", metricsFlag, 0, 0, 65535) : undefined;
  const { openenv: section, ...config } = await envConfig(flags);
  const limits = serverLimits(flags, section);
  try {
    new ModelUrlPolicy(limits.modelUrlAllow ?? []); // a bad prefix is a usage error before anything starts
  } catch (err) {
    throw new CliUsageError((err as Error).message);
  }
  const Env = await loadEnvClass(spec);

  const logger = createLogger({ name: "openenv-server", level: process.env["SLOTPOOL_LOG_LEVEL"] ?? "info" });
  let env;
  try {
    env = new Env(config, { logger });
  } catch (err) {
    if (err instanceof EnvConfigError) throw new CliUsageError(err.message);
    throw err;
  }
  await env.start();
  let server: OpenEnvServer;
  try {
    server = new OpenEnvServer({ env, logger, idleTimeoutMs, limits, ...(token ? { token } : {}) });
  } catch (err) {
    await env.close();
    if (err instanceof OpenEnvError) throw new CliUsageError(err.message);
    throw err;
  }
  let metrics: Awaited<ReturnType<typeof serveRunMetrics>> | undefined;
  if (metricsPort !== undefined) {
    const registry = new MetricsRegistry();
    registerOpenEnvMetrics(registry, server);
    metrics = await serveRunMetrics(registry, metricsPort);
    logger.info({ url: metrics.url }, "metrics");
  }
  let stopping: Promise<void> | undefined;
  // Stopping ends every session: each episode's slot is released (reset), then the pool stops.
  const shutdown = () => (stopping ??= server.close().then(async () => {
    await metrics?.close();
    await env.close();
  }));
  return serveUntilStopped({
    logger,
    listen: () => server.listen(port, host),
    listening: (url) => ({ url, env: env.name, provisioner: env.config.pool.provisioner, ws: `${url.replace(/^http/, "ws")}/ws`, mcp: `${url}/mcp`, status: `${url}/status`, run_model_urls: limits.modelUrlAllow ?? [], ...(metrics ? { metrics: metrics.url } : {}) }),
    stopping: "ending every episode",
    shutdown,
  });
}
