/**
 * `slotpool status`: pool and job state for an operator, from an executor service's
 * `/status` and/or Nomad (slotpool jobs by Meta, allocations by status, scale status).
 */
import { NomadClient } from "../nomad/client.js";
import { NomadConfigError } from "../nomad/errors.js";
import { StatusSourceError, fetchExecutorStatus, fetchNomadStatus, renderStatus, type StatusReport } from "./status-report.js";
import { CliUsageError, boolFlag, intFlag, parseFlags, stringFlag } from "./usage.js";

const HELP = `usage: slotpool status [--executor-url URL [--token T]] [--nomad] [options]

Prints pool and job state for an operator:
  - from an executor service (--executor-url): calls, errors, queue, slots held/free/lost,
    containers by state, scale events, acquire latency (its GET /status);
  - from Nomad (when NOMAD_ADDR is set, or with --nomad): slotpool's jobs (found by their
    Meta), their allocations by status and the sandbox group's scale status.

options:
  --executor-url URL       executor service to ask (e.g. http://127.0.0.1:9001)
  --token T                its bearer token (or env TOOL_EXECUTOR_TOKEN)
  --nomad                  also ask Nomad (default when NOMAD_ADDR is set)
  --no-nomad               do not ask Nomad even if NOMAD_ADDR is set
  --prefix P               Nomad: only jobs whose ID starts with P
  --json                   print the report as JSON
  --timeout-ms MS          bound on each request (default 5000)

environment: NOMAD_ADDR, NOMAD_TOKEN, NOMAD_NAMESPACE, NOMAD_REGION, NOMAD_CACERT,
NOMAD_CLIENT_CERT, NOMAD_CLIENT_KEY; TOOL_EXECUTOR_TOKEN

exit status: 0 when every source asked answered, 1 when one failed, 2 on a usage error.
`;

export async function run(argv: string[]): Promise<number> {
  const flags = parseFlags(
    argv,
    {
      "executor-url": { type: "string" },
      token: { type: "string" },
      nomad: { type: "boolean" },
      "no-nomad": { type: "boolean" },
      prefix: { type: "string" },
      json: { type: "boolean" },
      "timeout-ms": { type: "string" },
    },
    HELP,
  );
  if (!flags) return 0;
  const executorUrl = stringFlag(flags, "executor-url");
  const token = stringFlag(flags, "token") ?? (process.env["TOOL_EXECUTOR_TOKEN"] || undefined);
  const timeoutMs = intFlag("timeout-ms", stringFlag(flags, "timeout-ms"), 5_000, 100, 600_000);
  const askNomad = !boolFlag(flags, "no-nomad") && (boolFlag(flags, "nomad") || Boolean(process.env["NOMAD_ADDR"]));
  if (!executorUrl && !askNomad) {
    throw new CliUsageError(`nothing to report on: pass --executor-url URL (an executor service) and/or set NOMAD_ADDR (or --nomad)\n\n${HELP}`);
  }
  if (executorUrl && !/^https?:\/\//.test(executorUrl)) throw new CliUsageError(`--executor-url must start with http:// or https://, got '${executorUrl}'`);

  const report: StatusReport = { errors: [] };
  const tasks: Array<Promise<void>> = [];
  if (executorUrl) {
    tasks.push(
      fetchExecutorStatus(executorUrl, token, timeoutMs).then(
        (s) => void (report.executor = s),
        (err: unknown) => void report.errors.push(asSourceError("executor", err)),
      ),
    );
  }
  if (askNomad) {
    let client: NomadClient | undefined;
    try {
      client = NomadClient.fromEnv({ timeoutMs, retry: { attempts: 2, baseMs: 100, maxMs: 500 } });
    } catch (err) {
      if (err instanceof NomadConfigError) throw new CliUsageError(err.message);
      throw err;
    }
    const prefix = stringFlag(flags, "prefix");
    tasks.push(
      fetchNomadStatus(client, prefix ? { prefix } : {})
        .then(
          (s) => void (report.nomad = s),
          (err: unknown) => void report.errors.push(asSourceError("nomad", err)),
        )
        .finally(() => client!.close()),
    );
  }
  await Promise.all(tasks);
  if (boolFlag(flags, "json")) {
    process.stdout.write(JSON.stringify({ ...report, errors: report.errors.map((e) => ({ source: e.source, message: e.message })) }, null, 2) + "\n");
  } else {
    const text = renderStatus(report);
    if (report.errors.length && !report.executor && !report.nomad) process.stderr.write(text);
    else process.stdout.write(text);
  }
  return report.errors.length ? 1 : 0;
}

function asSourceError(source: "executor" | "nomad", err: unknown): StatusSourceError {
  return err instanceof StatusSourceError ? err : new StatusSourceError(source, err instanceof Error ? err.message : String(err), { cause: err });
}
