/**
 * `slotpool process|serve|evaluate ENV`: load an env module (default export: an AgentEnv
 * subclass), start it on the chosen provisioner and run it in Atropos's run modes.
 */
import { existsSync } from "node:fs";
import { readFile } from "node:fs/promises";
import { isAbsolute, join, relative, resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { AgentEnv } from "../env/agent-env.js";
import { ProgressBar } from "../env/run-modes/progress.js";
import { runEvaluateMode } from "../env/run-modes/evaluate.js";
import { runProcessMode } from "../env/run-modes/process.js";
import { runServeMode } from "../env/run-modes/serve.js";
import { formatSummary } from "../env/run-modes/summary.js";
import { RunStats } from "../env/run-stats.js";
import { createLogger } from "../observability/logger.js";
import { CliUsageError, intFlag, parseFlags, stringFlag, boolFlag, type ParsedFlags } from "./usage.js";

const COMMON = `  --groups N               groups to make (process) or send (serve; default until the trainer's num_steps)
  --group-size K           trajectories per group, each in its own slot
  --provisioner P          local (child processes, default) or nomad (NOMAD_* environment)
  --model-url URL          OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1 (default: the env's oracle policy)
  --model NAME             the model name the server knows
  --tool-call-format F     native (tools=, default) or hermes (tools in the prompt, <tool_call> text)
  --max-turns N            model turns per trajectory
  --concurrency N          groups in flight at once
  --slots-per-container N  slots per sandbox server
  --max-containers N       most sandbox servers
  --tokenizer FILE         the model's HF tokenizer.json (tokenizer_config.json beside it): its chat template
                           for --server-type vllm|sglang; tokens/masks when an openai server returns no ids
  --server-type T          openai (chat completions, default; not token-exact), vllm or sglang (token in,
                           token out: every trained id as sampled; needs --tokenizer)
  --tool-call-parser P     token-exact servers: hermes (default) or qwen3 (<think> kept apart)
  --allow-inexact-tokens   serve: send trajectories that are not token-exact (also SLOTPOOL_ALLOW_INEXACT_TOKENS=1)
  --config FILE            JSON file of env config fields (flags win over it)
  --no-progress            no progress bar
  --no-report              no HTML report beside the JSONL (process, evaluate)
API keys come from the environment variable named by the config's apiKeyEnv (default OPENAI_API_KEY).`;

const HELP = {
  process: `usage: slotpool process ENV [--out FILE] [options]

Runs the env and writes each scored group as one JSONL line (Atropos process-mode format),
and an HTML report of the rollouts beside it (FILE with .html).
ENV is a module path whose default export is an AgentEnv subclass.

options:
  --out FILE               output JSONL (default data/<env name>.jsonl; an existing file gets _1, _2, ...)
${COMMON}`,
  serve: `usage: slotpool serve ENV --atropos-url URL [options]

Runs the env and feeds an Atropos trainer through its trajectory API.

options:
  --atropos-url URL        the trajectory API, e.g. http://localhost:8000
${COMMON}`,
  evaluate: `usage: slotpool evaluate ENV [--out-dir DIR] [options]

Runs the env's evaluate() and writes metrics.json, samples.jsonl and samples.html (the report).

options:
  --out-dir DIR            where to write (default eval/<env name>)
${COMMON}`,
};

const FLAGS = {
  out: { type: "string" },
  "out-dir": { type: "string" },
  "atropos-url": { type: "string" },
  groups: { type: "string" },
  "group-size": { type: "string" },
  provisioner: { type: "string" },
  "model-url": { type: "string" },
  model: { type: "string" },
  "tool-call-format": { type: "string" },
  "max-turns": { type: "string" },
  concurrency: { type: "string" },
  "slots-per-container": { type: "string" },
  "max-containers": { type: "string" },
  tokenizer: { type: "string" },
  "server-type": { type: "string" },
  "tool-call-parser": { type: "string" },
  "allow-inexact-tokens": { type: "boolean" },
  config: { type: "string" },
  "no-progress": { type: "boolean" },
  "no-report": { type: "boolean" },
} as const;

type EnvConstructor = new (config?: Record<string, unknown>, runtime?: ConstructorParameters<typeof AgentEnv>[1]) => AgentEnv<unknown>;

/**
 * Finds the env module: the path as given (relative to the working directory), else its
 * built copy under dist/ (so `examples/x/env.ts` and `examples/x/env.js` both work from a
 * clone after `npm run build`).
 */
export function resolveEnvModule(spec: string, cwd = process.cwd()): string {
  const direct = isAbsolute(spec) ? spec : resolve(cwd, spec);
  const rel = relative(cwd, direct);
  const inRepo = !rel.startsWith("..") && !isAbsolute(rel) && !rel.startsWith("dist");
  const built = inRepo ? [join(cwd, "dist", rel.replace(/\.ts$/, ".js"))] : [];
  // Node cannot import .ts: a TypeScript path means its compiled copy (unless run under tsx).
  const candidates = direct.endsWith(".ts") ? [...built, direct.replace(/\.ts$/, ".js"), direct] : [direct, ...built];
  for (const c of candidates) if (existsSync(c)) return c;
  throw new CliUsageError(`cannot find the env module '${spec}' (looked at ${candidates.join(", ")}); run 'npm run build' if it is a TypeScript file of this repo`);
}

export async function loadEnvClass(spec: string): Promise<EnvConstructor> {
  const path = resolveEnvModule(spec);
  const mod = (await import(pathToFileURL(path).href)) as { default?: unknown };
  const cls = mod.default;
  const isEnv =
    typeof cls === "function" &&
    (cls.prototype instanceof AgentEnv || typeof (cls.prototype as { collectTrajectories?: unknown }).collectTrajectories === "function");
  if (!isEnv) throw new CliUsageError(`${path} must default-export an AgentEnv subclass (export default class MyEnv extends AgentEnv { ... })`);
  return cls as EnvConstructor;
}

async function envConfigFromFlags(flags: ParsedFlags): Promise<Record<string, unknown>> {
  let config: Record<string, unknown> = {};
  const file = stringFlag(flags, "config");
  if (file) {
    try {
      config = JSON.parse(await readFile(file, "utf8")) as Record<string, unknown>;
    } catch (err) {
      throw new CliUsageError(`--config ${file}: ${(err as Error).message}`);
    }
  }
  const num = (name: string, key: string, min = 1) => {
    const v = stringFlag(flags, name);
    if (v !== undefined) config[key] = intFlag(name, v, 0, min);
  };
  num("group-size", "groupSize");
  num("groups", "totalGroups");
  num("max-turns", "maxTurns");
  num("concurrency", "groupConcurrency");
  num("slots-per-container", "slotsPerContainer");
  num("max-containers", "maxContainers");
  const provisioner = stringFlag(flags, "provisioner");
  if (provisioner !== undefined) {
    if (provisioner !== "local" && provisioner !== "nomad") throw new CliUsageError(`--provisioner must be local or nomad, got '${provisioner}'`);
    config["provisioner"] = provisioner;
  }
  const fmt = stringFlag(flags, "tool-call-format");
  if (fmt !== undefined) {
    if (fmt !== "native" && fmt !== "hermes") throw new CliUsageError(`--tool-call-format must be native or hermes, got '${fmt}'`);
    config["toolCallFormat"] = fmt;
  }
  const modelUrl = stringFlag(flags, "model-url");
  const model = stringFlag(flags, "model");
  if (modelUrl !== undefined) config["modelUrl"] = modelUrl;
  if (model !== undefined) config["modelName"] = model;
  if (config["modelUrl"] && !config["modelName"]) throw new CliUsageError("--model-url needs --model NAME (the model as the server knows it)");
  const tokenizer = stringFlag(flags, "tokenizer");
  if (tokenizer !== undefined) config["tokenizerPath"] = tokenizer;
  const serverType = stringFlag(flags, "server-type");
  if (serverType !== undefined) {
    if (!["openai", "vllm", "sglang"].includes(serverType)) throw new CliUsageError(`--server-type must be openai, vllm or sglang, got '${serverType}'`);
    config["serverType"] = serverType;
  }
  const parser = stringFlag(flags, "tool-call-parser");
  if (parser !== undefined) {
    if (parser !== "hermes" && parser !== "qwen3") throw new CliUsageError(`--tool-call-parser must be hermes or qwen3, got '${parser}'`);
    config["toolCallParser"] = parser;
  }
  if (boolFlag(flags, "allow-inexact-tokens")) config["allowInexactTokens"] = true;
  if (config["serverType"] && config["serverType"] !== "openai" && !config["tokenizerPath"]) {
    throw new CliUsageError(`--server-type ${String(config["serverType"])} needs --tokenizer path/to/tokenizer.json (the model's, with tokenizer_config.json beside it)`);
  }
  return config;
}

type Mode = "process" | "serve" | "evaluate";

async function runMode(mode: Mode, argv: string[]): Promise<number> {
  const flags = parseFlags(argv, FLAGS, HELP[mode], true);
  if (!flags) return 0;
  const [spec, ...extra] = flags.positionals;
  if (!spec) throw new CliUsageError(`missing ENV (a module path whose default export is an AgentEnv subclass)\n\n${HELP[mode]}`);
  if (extra.length) throw new CliUsageError(`unexpected arguments: ${extra.join(" ")}`);
  const atroposUrl = stringFlag(flags, "atropos-url");
  if (mode === "serve" && !atroposUrl) throw new CliUsageError(`serve needs --atropos-url URL\n\n${HELP.serve}`);

  const Env = await loadEnvClass(spec);
  const config = await envConfigFromFlags(flags);
  const logger = createLogger({ name: "slotpool", level: process.env["SLOTPOOL_LOG_LEVEL"] ?? "warn" });
  const env = new Env(config, { logger });
  const groupsFlag = stringFlag(flags, "groups");
  const groups = groupsFlag !== undefined ? intFlag("groups", groupsFlag, 1, 1) : undefined;
  const showProgress = !boolFlag(flags, "no-progress");
  const report = !boolFlag(flags, "no-report");

  const controller = new AbortController();
  let interrupted = false;
  const onSignal = () => {
    if (interrupted) process.exit(130);
    interrupted = true;
    process.stderr.write("\nslotpool: stopping (releasing slots and containers; Ctrl-C again to force)\n");
    controller.abort(new Error("interrupted"));
  };
  process.on("SIGINT", onSignal);
  process.on("SIGTERM", onSignal);

  const title = `slotpool ${mode} ${env.name} — ${env.config.modelUrl ? `model ${env.config.modelName}` : "oracle policy"}, ${env.config.provisioner} provisioner`;
  try {
    process.stderr.write(`slotpool ${mode}: starting ${env.name} on the ${env.config.provisioner} provisioner…\n`);
    await env.start();
    if (mode === "process") {
      const total = groups ?? env.config.totalGroups;
      const bar = showProgress ? new ProgressBar(`${mode} ${env.name}`, total, process.stderr, "written") : undefined;
      const out = stringFlag(flags, "out") ?? join("data", `${env.name}.jsonl`);
      const run = runProcessMode(env, { out, groups: total, logger, report, onGroup: (_o, stats) => bar?.update(stats) });
      const done = await Promise.race([run, aborted(controller.signal)]);
      bar?.finish();
      const rows: Array<[string, string]> = [["written", `${done.written} groups → ${done.out}`]];
      if (done.report) rows.push(["report", `${done.report.path} (${megabytes(done.report.bytes)})`]);
      process.stdout.write(formatSummary(title, done.stats, rows));
      return done.stats.failedGroups > 0 ? 1 : 0;
    }
    if (mode === "serve") {
      const bar = showProgress ? new ProgressBar(`${mode} ${env.name}`, groups, process.stderr, "sent") : undefined;
      const { stats, report } = await runServeMode(env, {
        atroposUrl: atroposUrl!,
        logger,
        signal: controller.signal,
        ...(groups !== undefined ? { groups } : {}),
        onGroup: (_o, s) => bar?.update(s),
      });
      bar?.finish();
      process.stdout.write(formatSummary(title, stats, [["sent", `${report.sent} groups (env_id ${report.registration.env_id}, ${report.backoffs} back-offs)`], ["stopped", report.stopReason]]));
      return stats.failedGroups > 0 ? 1 : 0;
    }
    const stats = new RunStats();
    const bar = showProgress ? new ProgressBar(`${mode} ${env.name}`, undefined) : undefined;
    const outDir = stringFlag(flags, "out-dir") ?? join("eval", env.name);
    const done = await Promise.race([
      runEvaluateMode(env, {
        outDir,
        report,
        stats,
        onTrajectory: (t) => {
          stats.addTrajectory(t);
          stats.groups++;
          bar?.update(stats);
        },
      }),
      aborted(controller.signal),
    ]);
    bar?.finish();
    const metrics = Object.entries(done.result.metrics).map(([k, v]) => [k, String(Number.isInteger(v) ? v : v.toFixed(3))] as [string, string]);
    const rows: Array<[string, string]> = [...metrics, ["metrics", done.metricsPath], ["samples", done.samplesPath]];
    if (done.report) rows.push(["report", `${done.report.path} (${megabytes(done.report.bytes)})`]);
    process.stdout.write(formatSummary(title, stats, rows));
    return 0;
  } finally {
    process.off("SIGINT", onSignal);
    process.off("SIGTERM", onSignal);
    await env.close();
  }
}

function megabytes(bytes: number): string {
  return `${(bytes / 1e6).toFixed(2)} MB`;
}

function aborted(signal: AbortSignal): Promise<never> {
  return new Promise((_, reject) => {
    if (signal.aborted) reject(signal.reason);
    signal.addEventListener("abort", () => reject(signal.reason), { once: true });
  });
}

export const runProcess = (argv: string[]) => runMode("process", argv);
export const runServe = (argv: string[]) => runMode("serve", argv);
export const runEvaluate = (argv: string[]) => runMode("evaluate", argv);
