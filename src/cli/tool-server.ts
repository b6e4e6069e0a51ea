import { createLogger } from "../observability/logger.js";
import { loadToolModule } from "../executor/external-tool.js";
import { ToolServer } from "../executor/tool-server.js";
import { exposureProblem } from "../http/exposure.js";
import { CliUsageError, intFlag, parseFlags, stringFlag } from "./usage.js";

const HELP = `usage: slotpool tool-server --tools MODULE [options]

Hosts external tools in this process, so their credentials (API keys in this process's
environment) never reach the executor, the env or a sandbox.

options:
  --tools MODULE           JS module whose default export is an array of tools
                           ({name, description, kind: "external", parameters: zod schema, execute(args, ctx)})
  --host H                 address to listen on (default 127.0.0.1)
  --port P                 port (default 8090; 0 picks a free port)
  --token T                bearer token required on /tools and /execute (or env TOOL_SERVER_TOKEN)
  --max-concurrency N      tool calls running at once; the rest wait (default 16)
  --timeout S              timeout of calls that name none, seconds (default 60, max 600)
`;

export async function run(argv: string[]): Promise<number> {
  const flags = parseFlags(
    argv,
    {
      tools: { type: "string" },
      host: { type: "string" },
      port: { type: "string" },
      token: { type: "string" },
      "max-concurrency": { type: "string" },
      timeout: { type: "string" },
    },
    HELP,
  );
  if (!flags) return 0;
  const modulePath = stringFlag(flags, "tools");
  if (!modulePath) throw new CliUsageError(`--tools MODULE is required\n\n${HELP}`);
  const host = stringFlag(flags, "host") ?? "127.0.0.1";
  const port = intFlag("port", stringFlag(flags, "port"), 8090, 0, 65535);
  const maxConcurrency = intFlag("max-concurrency", stringFlag(flags, "max-concurrency"), 16, 1, 10_000);
  const defaultTimeoutS = intFlag("timeout", stringFlag(flags, "timeout"), 60, 1, 600);
  const token = stringFlag(flags, "token") ?? (process.env["TOOL_SERVER_TOKEN"] || undefined);
  const exposed = exposureProblem(host, token, "--token T or the environment variable TOOL_SERVER_TOKEN");
  if (exposed) throw new CliUsageError(exposed);

  const logger = createLogger({ name: "tool-server" });
  const tools = await loadToolModule(modulePath);
  const server = new ToolServer({ tools, token, maxConcurrency, defaultTimeoutS, logger });
  const url = await server.listen(port, host);
  logger.info({ url, tools: tools.map((t) => t.name), auth: token !== undefined, maxConcurrency }, "listening");

  await new Promise<void>((resolve) => {
    let seen = 0;
    const stop = (signal: NodeJS.Signals) => {
      // A second signal while calls are finishing means "stop now".
      if (++seen > 1) {
        logger.warn({ signal }, "second signal: exiting without waiting for running calls");
        logger.flush();
        process.exit(130);
      }
      logger.info({ signal }, "shutting down");
      resolve();
    };
    process.on("SIGTERM", stop);
    process.on("SIGINT", stop);
  });
  await server.close();
  logger.flush();
  return 0;
}
