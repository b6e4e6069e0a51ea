/**
 * `slotpool view FILE.jsonl`: the HTML report of any JSONL that `slotpool process|evaluate` or
 * Atropos's process mode wrote; `--serve` serves it on loopback (for a remote box: ssh -L).
 */
import { createReadStream } from "node:fs";
import { stat } from "node:fs/promises";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import { createInterface } from "node:readline";
import { closeGracefully, listenOn } from "../http/lifecycle.js";
import { readReportModel, renderReport, ReportInputError, writeReport } from "../report/index.js";
import { CliUsageError, boolFlag, intFlag, parseFlags, stringFlag } from "./usage.js";

const HELP = `usage: slotpool view FILE.jsonl [--out FILE.html] [--serve [--port N]]

Renders the rollouts of a JSONL file as one self-contained HTML page: groups and trajectories
with their scores, each conversation with its tool calls, results, exit codes and timings,
tool errors highlighted, filters by score and by "had a tool error". Reads what
'slotpool process' and 'slotpool evaluate' (samples.jsonl) write, and Atropos's process mode.

options:
  --out FILE     where to write the page (default: FILE with .html)
  --serve        serve the page on 127.0.0.1 instead (rebuilt on each load, so a run in
                 progress shows its new groups); from another machine: ssh -L PORT:127.0.0.1:PORT
  --port N       port to serve on (default 8377; 0 picks a free one)`;

const FLAGS = {
  out: { type: "string" },
  serve: { type: "boolean" },
  port: { type: "string" },
} as const;

export async function run(argv: string[]): Promise<number> {
  const flags = parseFlags(argv, FLAGS, HELP, true);
  if (!flags) return 0;
  const [file, ...extra] = flags.positionals;
  if (!file) throw new CliUsageError(`missing FILE.jsonl\n\n${HELP}`);
  if (extra.length) throw new CliUsageError(`unexpected arguments: ${extra.join(" ")}`);
  const info = await stat(file).catch(() => undefined);
  if (!info) throw new CliUsageError(`no such file: ${file}`);
  if (!info.isFile()) throw new CliUsageError(`${file} is not a file (give the JSONL, e.g. data/run.jsonl or eval/env/samples.jsonl)`);
  const out = stringFlag(flags, "out");
  if (!boolFlag(flags, "serve")) {
    if (stringFlag(flags, "port") !== undefined) throw new CliUsageError("--port goes with --serve");
    // A file with lines and not one group or sample in them is not a rollout file: say so, write nothing.
    const model = await readReportModel(file);
    if (model.groups.length === 0 && model.skipped.length > 0) {
      const first = model.skipped[0]!;
      throw new ReportInputError(
        `${file} is not a slotpool or Atropos JSONL: none of its ${model.skipped.length} lines is a scored group or an evaluation sample (line ${first.line}: ${first.reason}); give the file 'slotpool process' wrote (data/<env>.jsonl) or 'slotpool evaluate' wrote (eval/<env>/samples.jsonl)`,
      );
    }
    const r = await writeReport(file, out ? { out } : {});
    process.stdout.write(`${r.path}: ${r.summary.trajectories} trajectories in ${r.summary.groups} groups, ${(r.bytes / 1e6).toFixed(2)} MB\n`);
    return 0;
  }
  if (out) throw new CliUsageError("--out and --serve do not go together: --serve writes no file");
  const port = intFlag("port", stringFlag(flags, "port"), 8377, 0, 65535);
  return serve(file, port);
}

async function serve(file: string, port: number): Promise<number> {
  const server = createServer((req, res) => {
    handle(file, req, res).catch((err: unknown) => {
      if (!res.headersSent) send(res, 500, "text/plain; charset=utf-8", `cannot render ${file}: ${err instanceof Error ? err.message : String(err)}\n`);
      else res.destroy();
    });
  });
  let url: string;
  try {
    url = await listenOn(server, port, "127.0.0.1");
  } catch (err) {
    throw new CliUsageError(`cannot listen on 127.0.0.1:${port}: ${(err as Error).message} (try --port 0 for any free port)`);
  }
  const actual = new URL(url).port;
  process.stdout.write(`slotpool view: serving the report of ${file} at ${url}/\nfrom another machine: ssh -L ${actual}:127.0.0.1:${actual} THIS-HOST, then open http://127.0.0.1:${actual}/ (Ctrl-C stops)\n`);
  await new Promise<void>((resolve) => {
    const stop = () => {
      process.off("SIGINT", stop);
      process.off("SIGTERM", stop);
      resolve();
    };
    process.on("SIGINT", stop);
    process.on("SIGTERM", stop);
  });
  await closeGracefully(server, 1000);
  return 0;
}

async function handle(file: string, req: IncomingMessage, res: ServerResponse): Promise<void> {
  if (req.method !== "GET" && req.method !== "HEAD") return send(res, 405, "text/plain; charset=utf-8", "only GET\n");
  const path = new URL(req.url ?? "/", "http://localhost").pathname;
  if (path === "/" || path === "/index.html") {
    const model = await readReportModel(file);
    const { html } = renderReport(model, { lineHrefPrefix: "line/" });
    return send(res, 200, "text/html; charset=utf-8", html);
  }
  const m = /^\/line\/(\d+)$/.exec(path);
  if (m) {
    const text = await readLine(file, Number(m[1]));
    if (text === undefined) return send(res, 404, "text/plain; charset=utf-8", `${file} has no line ${m[1]}\n`);
    return send(res, 200, "application/json; charset=utf-8", text + "\n");
  }
  send(res, 404, "text/plain; charset=utf-8", "not found: the report is at /\n");
}

function send(res: ServerResponse, status: number, type: string, body: string): void {
  res.writeHead(status, {
    "content-type": type,
    "content-length": Buffer.byteLength(body),
    "x-content-type-options": "nosniff",
    "cache-control": "no-store",
  });
  res.end(res.req.method === "HEAD" ? undefined : body);
}

/** Line `n` (1-based) of the file, read without loading the whole file. */
async function readLine(file: string, n: number): Promise<string | undefined> {
  if (n < 1) return undefined;
  const lines = createInterface({ input: createReadStream(file, { encoding: "utf8" }), crlfDelay: Infinity });
  let i = 0;
  try {
    for await (const text of lines) if (++i === n) return text;
  } catch (err) {
    throw new ReportInputError(`cannot read ${file}: ${(err as Error).message}`);
  } finally {
    lines.close();
  }
  return undefined;
}
