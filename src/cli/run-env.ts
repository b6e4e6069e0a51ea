/**
 * `slotpool process|serve|evaluate ENV`: load an env module (default export: an AgentEnv
 * subclass), start it on the chosen provisioner and run it in Atropos's run modes.
 */
import { existsSync, readFileSync } from "node:fs";
import { readFile, rm } from "node:fs/promises";
import { isAbsolute, join, relative, resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { AgentEnv } from "../env/agent-env.js";
import { ModelServerError } from "../agent/model-check.js";
import { ProgressBar } from "../env/run-modes/progress.js";
import { runEvaluateMode } from "../env/run-modes/evaluate.js";
import { runProcessMode } from "../env/run-modes/process.js";
import { makeDirectories, OutputPathError, prepareOutputFile } from "../env/run-modes/output-path.js";
import { EnvConfigError } from "../env/errors.js";
import { formatCauses, INFRA_FAILURE_POLICIES } from "../env/infra-failure.js";
import { MetricsRegistry } from "../observability/metrics.js";
import { serveRunMetrics } from "./metrics-endpoint.js";
import { runServeMode } from "../env/run-modes/serve.js";
import { formatSummary, NO_TOKEN_IDS_HINT } from "../env/run-modes/summary.js";
import { RunStats } from "../env/run-stats.js";
import { createLogger, flushRepeats, LOG_FORMATS, type LogFormat } from "../observability/logger.js";
import { getConfigPath, setConfigPath } from "./config-path.js";
import { CliUsageError, intFlag, parseFlags, stringFlag, boolFlag, type ParsedFlags } from "./usage.js";
import { insecureRegistriesFlag } from "./backend-flags.js";
import { ItemImageError } from "../env/item-image.js";

type Mode = "process" | "serve" | "evaluate";
const ALL: Mode[] = ["process", "serve", "evaluate"];

/** Every option of the three commands, with the commands that take it: each `--help` lists only its own. */
const OPTIONS: Array<{ flag: string; type: "string" | "boolean"; multiple?: true; modes: Mode[]; help: string | Partial<Record<Mode, string>> }> = [
  { flag: "out", type: "string", modes: ["process"], help: "--out FILE               output JSONL (default data/<env name>.jsonl; an existing file gets _1, _2, ...)" },
  { flag: "out-dir", type: "string", modes: ["evaluate"], help: "--out-dir DIR            where to write (default eval/<env name>)" },
  { flag: "atropos-url", type: "string", modes: ["serve"], help: "--atropos-url URL        the trajectory API, e.g. http://localhost:8000" },
  {
    flag: "groups",
    type: "string",
    modes: ["process", "serve"],
    help: {
      process: "--groups N               groups to make (default: the env's totalGroups, 8)",
      serve: "--groups N               groups to send, then stop (default: until the trainer's num_steps)",
    },
  },
  { flag: "group-size", type: "string", modes: ["process", "serve"], help: "--group-size K           trajectories per group, each in its own slot" },
  { flag: "provisioner", type: "string", modes: ALL, help: "--provisioner P          local (child processes, default) or nomad (NOMAD_* environment)" },
  { flag: "model-url", type: "string", modes: ALL, help: "--model-url URL          OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1 (default: the env's oracle policy);\n                           checked before the run: it must answer and serve --model" },
  { flag: "model", type: "string", modes: ALL, help: "--model NAME             the model name the server knows (needs --model-url)" },
  { flag: "tool-call-format", type: "string", modes: ALL, help: "--tool-call-format F     native (tools=, default) or hermes (tools in the prompt, <tool_call> text)" },
  { flag: "max-turns", type: "string", modes: ALL, help: "--max-turns N            model turns per trajectory" },
  { flag: "concurrency", type: "string", modes: ALL, help: "--concurrency N          groups in flight at once" },
  { flag: "slots-per-container", type: "string", modes: ALL, help: "--slots-per-container N  slots per sandbox server" },
  { flag: "max-containers", type: "string", modes: ALL, help: "--max-containers N       most sandbox servers" },
  { flag: "insecure-registry", type: "string", multiple: true, modes: ALL, help: "--insecure-registry H:P  a registry of the items' task images that may answer plain HTTP (repeatable;\n                           images.insecureRegistries in --config); credentials: SLOTPOOL_REGISTRY_AUTH or\n                           REGISTRY_AUTH_FILE in the environment, never a flag (docs/images.md)" },
  { flag: "tokenizer", type: "string", modes: ALL, help: "--tokenizer FILE         the model's HF tokenizer.json (tokenizer_config.json beside it): its chat template\n                           for --server-type vllm|sglang; tokens/masks when an openai server returns no ids" },
  { flag: "server-type", type: "string", modes: ALL, help: "--server-type T          openai (chat completions, default; not token-exact), vllm or sglang (token in,\n                           token out: every trained id as sampled; needs --tokenizer)" },
  { flag: "tool-call-parser", type: "string", modes: ALL, help: "--tool-call-parser P     token-exact servers: hermes (default) or qwen3 (<think> kept apart)" },
  { flag: "allow-inexact-tokens", type: "boolean", modes: ["serve"], help: "--allow-inexact-tokens   send trajectories that are not token-exact (also SLOTPOOL_ALLOW_INEXACT_TOKENS=1)" },
  { flag: "success-threshold", type: "string", modes: ALL, help: "--success-threshold X    a trajectory is solved when its score is at least X (default 1.0)" },
  { flag: "infra-failure-policy", type: "string", modes: ["process", "serve"], help: "--infra-failure-policy P drop (default: drop the group, retry its item), mask (leave the failed\n                           trajectory out of its group) or fail (stop the run) when a model call, a slot or the\n                           reward fails; such a trajectory is never scored nor written" },
  { flag: "config", type: "string", modes: ALL, help: "--config FILE            JSON file of the env config: its own fields and the sections model, tools, pool,\n                           executor, images, trainer (docs/env.md; flags win over it; an unknown key is an error)" },
  { flag: "set", type: "string", multiple: true, modes: ALL, help: "--set PATH=VALUE         one config field by its path, e.g. --set pool.maxContainers=4 --set model.temperature=0.7\n                           (VALUE is JSON when it parses as JSON, else a string; repeatable; over --config)" },
  { flag: "metrics-port", type: "string", modes: ["process", "serve"], help: "--metrics-port N         serve the run's GET /metrics on 127.0.0.1:N (0: any free port, printed)" },
  { flag: "log-format", type: "string", modes: ALL, help: "--log-format F           pretty (default: short lines, a repeated warning once with its count) or json (pino lines)" },
  { flag: "no-progress", type: "boolean", modes: ALL, help: "--no-progress            no progress bar" },
  { flag: "no-report", type: "boolean", modes: ["process", "evaluate"], help: "--no-report              no HTML report beside the output" },
];

const INTRO: Record<Mode, string> = {
  process: `usage: slotpool process ENV [--out FILE] [options]

Runs the env and writes each scored group as one JSONL line (Atropos process-mode format),
and an HTML report of the rollouts beside it (FILE with .html).`,
  serve: `usage: slotpool serve ENV --atropos-url URL [options]

Runs the env and feeds an Atropos trainer through its trajectory API.`,
  evaluate: `usage: slotpool evaluate ENV [--out-dir DIR] [options]

Runs the env's evaluate() and writes metrics.json, samples.jsonl and samples.html (the report).`,
};

const EXIT_CODES: Record<Mode, string> = {
  process: "0 every group written; 1 groups failed or were dropped, or none written; 2 a usage error; 130 interrupted",
  serve: "0 the groups were sent; 1 groups failed or were dropped, or none sent; 2 a usage error; 130 interrupted",
  evaluate: "0 every item evaluated; 1 items failed, or the env has no eval items; 2 a usage error; 130 interrupted",
};

function helpFor(mode: Mode): string {
  // Each command's own text: a flag two commands share says what it does in this one.
  const options = OPTIONS.filter((o) => o.modes.includes(mode)).map((o) => `  ${typeof o.help === "string" ? o.help : o.help[mode]}`);
  return `${INTRO[mode]}
ENV is a module path whose default export is an AgentEnv subclass.

options:
${options.join("\n")}
API keys come from the environment variable named by the config's model.apiKeyEnv (default OPENAI_API_KEY).
exit codes: ${EXIT_CODES[mode]}.`;
}

function flagsFor(mode: Mode): Record<string, { type: "string" | "boolean"; multiple?: true }> {
  return Object.fromEntries(OPTIONS.filter((o) => o.modes.includes(mode)).map((o) => [o.flag, { type: o.type, ...(o.multiple ? { multiple: o.multiple } : {}) }]));
}

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
  // `npm run build` is this repository's script; in a project of one's own it means nothing.
  const hint = isSlotpoolCheckout(cwd)
    ? "; run 'npm run build' if it is a TypeScript file of this repo"
    : direct.endsWith(".ts")
      ? "; a TypeScript env runs from its compiled .js: compile it (npx tsc) and pass the file tsc writes (its outDir)"
      : "; check the path (it is relative to the working directory)";
  throw new CliUsageError(`cannot find the env module '${spec}' (looked at ${candidates.join(", ")})${hint}`);
}

/** Whether `dir` is a checkout of slotpool itself (its package.json names it), where `npm run build` builds the examples. */
function isSlotpoolCheckout(dir: string): boolean {
  try {
    return (JSON.parse(readFileSync(join(dir, "package.json"), "utf8")) as { name?: unknown }).name === "slotpool";
  } catch {
    return false;
  }
}

export async function loadEnvClass(spec: string): Promise<EnvConstructor> {
  const path = resolveEnvModule(spec);
  let mod: { default?: unknown };
  try {
    mod = (await import(pathToFileURL(path).href)) as { default?: unknown };
  } catch (err) {
    // Node does not run TypeScript: a usage error with the two ways out, not "Unknown file extension".
    if ((err as { code?: string }).code === "ERR_UNKNOWN_FILE_EXTENSION" && /\.[cm]?tsx?$/.test(path)) {
      throw new CliUsageError(
        `${spec} is TypeScript, which node cannot load: compile it first (npx tsc, then pass the .js file it writes), or run slotpool under tsx (npx tsx node_modules/slotpool/dist/src/cli/main.js process ${spec})`,
      );
    }
    throw err;
  }
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
    let parsed: unknown;
    try {
      parsed = JSON.parse(await readFile(file, "utf8"));
    } catch (err) {
      throw new CliUsageError(`--config ${file}: ${(err as Error).message}`);
    }
    if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed)) throw new CliUsageError(`--config ${file}: must hold a JSON object of env config fields`);
    config = parsed as Record<string, unknown>;
  }
  // Each flag sets one field, by its path in the config's sections; the flag wins over the file.
  const set = (path: string, value: unknown) => setConfigPath(config, path, value);
  const sets = flags.values["set"];
  for (const s of Array.isArray(sets) ? sets : []) {
    const m = /^([A-Za-z_$][\w$]*(?:\.[A-Za-z_$][\w$]*)*)=(.*)$/s.exec(String(s));
    if (!m) throw new CliUsageError(`--set needs PATH=VALUE with a dotted field path, e.g. --set pool.maxContainers=4; got '${String(s)}'`);
    set(m[1]!, parseSetValue(m[2]!));
  }
  const num = (name: string, path: string, min = 1) => {
    const v = stringFlag(flags, name);
    if (v !== undefined) set(path, intFlag(name, v, 0, min));
  };
  num("group-size", "groupSize");
  num("groups", "totalGroups");
  num("max-turns", "maxTurns");
  num("concurrency", "groupConcurrency");
  num("slots-per-container", "pool.slotsPerContainer");
  num("max-containers", "pool.maxContainers");
  const insecure = insecureRegistriesFlag(flags, getConfigPath(config, "images.insecureRegistries"));
  if (insecure) set("images.insecureRegistries", insecure);
  const provisioner = stringFlag(flags, "provisioner");
  if (provisioner !== undefined) {
    if (provisioner !== "local" && provisioner !== "nomad") throw new CliUsageError(`--provisioner must be local or nomad, got '${provisioner}'`);
    set("pool.provisioner", provisioner);
  }
  const fmt = stringFlag(flags, "tool-call-format");
  if (fmt !== undefined) {
    if (fmt !== "native" && fmt !== "hermes") throw new CliUsageError(`--tool-call-format must be native or hermes, got '${fmt}'`);
    set("model.toolCallFormat", fmt);
  }
  const modelUrl = stringFlag(flags, "model-url");
  const model = stringFlag(flags, "model");
  if (modelUrl !== undefined) set("model.url", modelUrl);
  if (model !== undefined) set("model.name", model);
  const url = getConfigPath(config, "model.url");
  const name = getConfigPath(config, "model.name");
  if (url && !name) throw new CliUsageError("--model-url needs --model NAME (the model as the server knows it; model.name in --config)");
  // A model name alone would silently run the oracle policy.
  if (name && !url) throw new CliUsageError("--model needs --model-url URL (the OpenAI-compatible server that serves it; model.url in --config); without both the env's oracle policy plays the model");
  const threshold = stringFlag(flags, "success-threshold");
  if (threshold !== undefined) {
    const x = Number(threshold);
    if (threshold.trim() === "" || !Number.isFinite(x)) throw new CliUsageError(`--success-threshold must be a number, got '${threshold}'`);
    set("successThreshold", x);
  }
  const policy = stringFlag(flags, "infra-failure-policy");
  if (policy !== undefined) {
    if (!(INFRA_FAILURE_POLICIES as readonly string[]).includes(policy)) throw new CliUsageError(`--infra-failure-policy must be ${INFRA_FAILURE_POLICIES.join(", ")}, got '${policy}'`);
    set("infraFailurePolicy", policy);
  }
  const tokenizer = stringFlag(flags, "tokenizer");
  if (tokenizer !== undefined) set("model.tokenizerPath", tokenizer);
  const serverType = stringFlag(flags, "server-type");
  if (serverType !== undefined) {
    if (!["openai", "vllm", "sglang"].includes(serverType)) throw new CliUsageError(`--server-type must be openai, vllm or sglang, got '${serverType}'`);
    set("model.serverType", serverType);
  }
  const parser = stringFlag(flags, "tool-call-parser");
  if (parser !== undefined) {
    if (parser !== "hermes" && parser !== "qwen3") throw new CliUsageError(`--tool-call-parser must be hermes or qwen3, got '${parser}'`);
    set("model.toolCallParser", parser);
  }
  if (boolFlag(flags, "allow-inexact-tokens")) set("trainer.allowInexactTokens", true);
  const chosenServer = getConfigPath(config, "model.serverType");
  if (chosenServer && chosenServer !== "openai" && !getConfigPath(config, "model.tokenizerPath")) {
    throw new CliUsageError(`--server-type ${String(chosenServer)} needs --tokenizer path/to/tokenizer.json (the model's, with tokenizer_config.json beside it; model.tokenizerPath in --config)`);
  }
  return config;
}

/** `--set` values: JSON when they parse as JSON (numbers, booleans, lists, null), else the text itself. */
function parseSetValue(raw: string): unknown {
  try {
    return JSON.parse(raw) as unknown;
  } catch {
    return raw;
  }
}

/** Exit codes: what the run did, said the same way by every command (see helpFor). */
const EXIT = { ok: 0, failed: 1, usage: 2, interrupted: 130, terminated: 143 } as const;
/** How long a signalled run may take to stop before it is ended anyway (SIGTERM must end it within 5 s). */
const STOP_GRACE_MS: Record<"SIGINT" | "SIGTERM", number> = { SIGINT: 15_000, SIGTERM: 4_000 };

async function runMode(mode: Mode, argv: string[]): Promise<number> {
  // Signals first: a run must stop on SIGTERM whatever it is doing (checks, pool start, run).
  const controller = new AbortController();
  let signalled: "SIGINT" | "SIGTERM" | undefined;
  const onSignal = (sig: "SIGINT" | "SIGTERM") => {
    const code = sig === "SIGINT" ? EXIT.interrupted : EXIT.terminated;
    if (signalled) process.exit(code);
    signalled = sig;
    process.stderr.write(`\nslotpool ${mode}: ${sig}: stopping (partial summary follows; releasing slots and containers; Ctrl-C again to force)\n`);
    controller.abort(new Error(`interrupted (${sig})`));
    setTimeout(() => {
      process.stderr.write(`slotpool ${mode}: did not stop within ${STOP_GRACE_MS[sig] / 1000} s of ${sig}; exiting\n`);
      process.exit(code);
    }, STOP_GRACE_MS[sig]).unref();
  };
  const onInt = () => onSignal("SIGINT");
  const onTerm = () => onSignal("SIGTERM");
  process.on("SIGINT", onInt);
  process.on("SIGTERM", onTerm);
  try {
    return await runModeChecked(mode, argv, controller.signal, () => signalled);
  } finally {
    process.off("SIGINT", onInt);
    process.off("SIGTERM", onTerm);
    // Stopped by a signal, with the summary out: an env hook still waiting (a timer, a socket)
    // must not keep the process alive. Unref'd: fires only if something else does.
    if (signalled) setTimeout(() => process.exit(signalled === "SIGINT" ? EXIT.interrupted : EXIT.terminated), 500).unref();
  }
}

async function runModeChecked(mode: Mode, argv: string[], signal: AbortSignal, signalled: () => "SIGINT" | "SIGTERM" | undefined): Promise<number> {
  const help = helpFor(mode);
  // A flag of a sibling command (process --out-dir) is named as such, not as an unknown option.
  for (const arg of argv) {
    const name = /^--([\w-]+)/.exec(arg)?.[1];
    const other = name ? OPTIONS.find((o) => o.flag === name && !o.modes.includes(mode)) : undefined;
    if (other) throw new CliUsageError(`--${other.flag} is an option of ${other.modes.map((m) => `'slotpool ${m}'`).join(" and ")}, not of '${mode}'\nRun 'slotpool ${mode} --help' for its options.`);
  }
  const flags = parseFlags(argv, flagsFor(mode), help, true);
  if (!flags) return EXIT.ok;
  // Everything a user can get wrong is found here, before any work: no pool starts for a typo.
  const [spec, ...extra] = flags.positionals;
  if (!spec) throw new CliUsageError(`missing ENV (a module path whose default export is an AgentEnv subclass)\n\n${help}`);
  if (extra.length) throw new CliUsageError(`unexpected arguments: ${extra.join(" ")}`);
  const atroposUrl = stringFlag(flags, "atropos-url");
  if (mode === "serve" && !atroposUrl) throw new CliUsageError(`serve needs --atropos-url URL\n\n${help}`);
  const logFormat = stringFlag(flags, "log-format");
  if (logFormat !== undefined && !(LOG_FORMATS as readonly string[]).includes(logFormat)) throw new CliUsageError(`--log-format must be ${LOG_FORMATS.join(" or ")}, got '${logFormat}'`);
  const metricsFlag = stringFlag(flags, "metrics-port");
  const metricsPort = metricsFlag !== undefined ? intFlag("metrics-port", metricsFlag, 0, 0, 65535) : undefined;
  const groupsFlag = stringFlag(flags, "groups");
  const groups = groupsFlag !== undefined ? intFlag("groups", groupsFlag, 1, 1) : undefined;

  const Env = await loadEnvClass(spec);
  const config = await envConfigFromFlags(flags);
  // A person reads a run's log (beside its progress and summary, also in a file or a pipe):
  // short lines unless --log-format json asks for pino's; a warning every trajectory repeats
  // (one dead model server) is written once and counted ("× 48") before the summary.
  const logger = createLogger({ name: "slotpool", level: process.env["SLOTPOOL_LOG_LEVEL"] ?? "warn", format: (logFormat as LogFormat | undefined) ?? "pretty", collapseRepeats: true });
  let env: AgentEnv<unknown>;
  try {
    env = new Env(config, { logger });
  } catch (err) {
    if (err instanceof EnvConfigError) throw new CliUsageError(`${err.message}${stringFlag(flags, "config") ? ` (from --config ${stringFlag(flags, "config")} and the flags)` : ""}`);
    throw err;
  }
  let out: string | undefined;
  let outDir: string | undefined;
  try {
    if (mode === "process") out = await prepareOutputFile(stringFlag(flags, "out") ?? join("data", `${env.name}.jsonl`));
    if (mode === "evaluate") await makeDirectories((outDir = stringFlag(flags, "out-dir") ?? join("eval", env.name)));
  } catch (err) {
    if (err instanceof OutputPathError) throw new CliUsageError(`--${mode === "process" ? "out" : "out-dir"}: ${err.message}`);
    throw err;
  }
  const showProgress = !boolFlag(flags, "no-progress");
  const report = !boolFlag(flags, "no-report");
  const stats = new RunStats({ successThreshold: env.config.successThreshold });
  const registry = new MetricsRegistry();
  stats.registerMetrics(registry);
  const metrics = metricsPort !== undefined ? await serveRunMetrics(registry, metricsPort) : undefined;
  if (metrics) process.stderr.write(`slotpool ${mode}: metrics at ${metrics.url}\n`);

  const title = `slotpool ${mode} ${env.name} — ${env.config.model.url ? `model ${env.config.model.name}` : "oracle policy"}, ${env.config.pool.provisioner} provisioner`;
  const exitFor = (failed: string | undefined): number => {
    const sig = signalled();
    if (sig) return sig === "SIGINT" ? EXIT.interrupted : EXIT.terminated;
    if (failed) process.stderr.write(`slotpool ${mode}: ${failed}\n`);
    return failed ? EXIT.failed : EXIT.ok;
  };
  let started = false;
  try {
    // The model server first, before "starting…": a --model it does not serve is the user's
    // typo (exit 2, as any usage error); a server that does not answer fails the run (exit 1).
    if (env.config.model.url && env.config.model.name) {
      await env.checkModel().catch((err: unknown) => {
        throw err instanceof ModelServerError && err.problem === "unknown_model" ? new CliUsageError(err.message) : err;
      });
    }
    process.stderr.write(`slotpool ${mode}: starting ${env.name} on the ${env.config.pool.provisioner} provisioner…\n`);
    const starting = env.start();
    starting.catch(() => {}); // a start abandoned on a signal may fail later; it was reported by then
    await Promise.race([starting, aborted(signal)]);
    started = true;
    // Said once the run is on (a model server that does not answer is the one error before that).
    const noIds = noTokenIdsWarning(env);
    if (noIds) process.stderr.write(`slotpool ${mode}: warning: ${noIds}\n`);
    stats.isolation = await env.isolation().catch(() => undefined);
    if (stats.isolation && stats.isolation.sandboxed < stats.isolation.containers - stats.isolation.unanswered) {
      logger.warn({ isolation: stats.isolation.sandbox }, "slots run WITHOUT a sandbox");
    }
    if (mode === "process") {
      const total = groups ?? env.config.totalGroups;
      const bar = showProgress ? new ProgressBar(`${mode} ${env.name}`, total, process.stderr, "written") : undefined;
      const done = await runProcessMode(env, { out: out!, prepared: true, groups: total, logger, report, stats, signal, onGroup: (_o, s) => bar?.update(s) });
      bar?.finish();
      const rows: Array<[string, string]> = [["written", `${done.written} groups → ${done.out}`]];
      if (done.report) rows.push(["report", `${done.report.path} (${megabytes(done.report.bytes)})`]);
      flushRepeats(logger);
    process.stdout.write(formatSummary(title, stats, rows));
      return exitFor(runVerdict(stats, done.written, "written"));
    }
    if (mode === "serve") {
      const bar = showProgress ? new ProgressBar(`${mode} ${env.name}`, groups, process.stderr, "sent") : undefined;
      const { report: sent } = await runServeMode(env, {
        atroposUrl: atroposUrl!,
        logger,
        signal,
        stats,
        ...(groups !== undefined ? { groups } : {}),
        onGroup: (_o, s) => bar?.update(s),
      });
      bar?.finish();
      if (sent.stopReason.startsWith("groups failed")) stats.stoppedEarly ??= sent.stopReason;
      if (signal.aborted) stats.stoppedEarly ??= "interrupted";
      flushRepeats(logger);
      process.stdout.write(formatSummary(title, stats, [["sent", `${sent.sent} groups (env_id ${sent.registration.env_id}, ${sent.backoffs} back-offs)`], ["stopped", sent.stopReason]]));
      return exitFor(runVerdict(stats, sent.sent, "sent"));
    }
    const bar = showProgress ? new ProgressBar(`${mode} ${env.name}`, undefined) : undefined;
    const done = await runEvaluateMode(env, {
      outDir: outDir!,
      report,
      stats,
      signal,
      onTrajectory: (t) => {
        // An item whose trajectory had an infra failure is in eval_failed: the summary says so too.
        stats.addTrajectory(t);
        stats.groups++;
        if (t.infraFailure) {
          stats.failedGroups++;
          stats.failures.push(`${t.infraFailure.cause}: ${t.infraFailure.message}`);
        } else stats.sentGroups++;
        bar?.update(stats);
      },
      onFailure: (reason, infra) => {
        stats.groups++;
        stats.failedGroups++;
        stats.failures.push(reason);
        if (infra) stats.addInfraFailure(infra);
        bar?.update(stats);
      },
    });
    bar?.finish();
    if (signal.aborted) stats.stoppedEarly ??= "interrupted";
    const m = done.result.metrics;
    const metricRows = Object.entries(m).map(([k, v]) => [k, String(Number.isInteger(v) ? v : v.toFixed(3))] as [string, string]);
    const rows: Array<[string, string]> = [...metricRows, ["metrics", done.metricsPath], ["samples", done.samplesPath]];
    if (done.report) rows.push(["report", `${done.report.path} (${megabytes(done.report.bytes)})`]);
    flushRepeats(logger);
    process.stdout.write(formatSummary(title, stats, rows));
    const failed = done.stoppedEarly
      ? `stopped early: ${done.stoppedEarly}`
      : m["eval_items"] === 0
        ? `the env has no eval items (getEvalItems() returned none): nothing was evaluated`
        : m["eval_failed"]
          ? `${m["eval_failed"]} of ${m["eval_items"]} eval items failed (see the summary); their scores are not in the metrics`
          : undefined;
    return exitFor(failed);
  } catch (err) {
    // An item's task image that cannot exist: the env's mistake, found before its group ran (exit 2).
    if (err instanceof ItemImageError) throw new CliUsageError(err.message);
    // A signal that broke off a wait (the pool starting, Atropos registration): say so, exit 130/143.
    if (signal.aborted) {
      if (!started) process.stderr.write(`slotpool ${mode}: interrupted before the run started\n`);
      else {
        stats.stoppedEarly ??= "interrupted";
        flushRepeats(logger);
        process.stdout.write(formatSummary(title, stats));
      }
      return exitFor(undefined);
    }
    throw err;
  } finally {
    await metrics?.close();
    await env.close();
    // An output prepared for a run that never started holds nothing: do not leave it behind.
    if (!started && out) await rm(out, { force: true });
  }
}

/**
 * Said at the start when the run cannot have token ids: no tokenizer and a chat server that
 * is not token-exact (an openai server may still return ids through extraBody; the summary
 * then tells). Not for the oracle policy, which samples no ids to miss.
 */
function noTokenIdsWarning(env: AgentEnv<unknown>): string | undefined {
  const model = env.config.model;
  // The oracle is no model: there are no sampled ids to miss (the summary's token ids row still says what the JSONL holds).
  if (!model.url) return undefined;
  if (model.tokenizerPath || (model.serverType && model.serverType !== "openai")) return undefined;
  if (model.url && model.extraBody && Object.keys(model.extraBody).some((k) => /token_ids|logprobs/.test(k))) return undefined;
  return `no --tokenizer: unless the model server returns token ids, ${NO_TOKEN_IDS_HINT}`;
}

/** Why a process/serve run did not do what was asked, or undefined when it did. */
function runVerdict(stats: RunStats, delivered: number, verb: "written" | "sent"): string | undefined {
  if (stats.stoppedEarly && stats.stoppedEarly !== "interrupted") return `stopped early: ${stats.stoppedEarly}`;
  if (stats.failedGroups > 0) {
    const dropped = stats.droppedGroups ? ` (${stats.droppedGroups} dropped for infra failures: ${formatCauses(stats.infraFailures)})` : "";
    return `${stats.failedGroups} of ${stats.groups} groups failed${dropped}`;
  }
  if (stats.groups === 0) return `the env gave no items: no group was made`;
  if (delivered === 0) return `all ${stats.groups} groups were filtered out (equal scores, size or token length): none ${verb}`;
  return undefined;
}

function megabytes(bytes: number): string {
  return `${(bytes / 1e6).toFixed(2)} MB`;
}

/** Rejects when `signal` aborts; marked handled, so a race it lost does not crash the process later. */
function aborted(signal: AbortSignal): Promise<never> {
  const p = new Promise<never>((_, reject) => {
    if (signal.aborted) reject(signal.reason);
    signal.addEventListener("abort", () => reject(signal.reason), { once: true });
  });
  p.catch(() => {});
  return p;
}

export const runProcess = (argv: string[]) => runMode("process", argv);
export const runServe = (argv: string[]) => runMode("serve", argv);
export const runEvaluate = (argv: string[]) => runMode("evaluate", argv);
