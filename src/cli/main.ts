#!/usr/bin/env node
/**
 * The `slotpool` command. Each subcommand lives in its own module and is loaded only when
 * called, so `slotpool sandbox-server` inside a container never loads the pool or env code.
 */
import { readFileSync } from "node:fs";
import { CliUsageError } from "./usage.js";

type Run = (argv: string[]) => Promise<number | void>;

const COMMANDS: Record<string, { summary: string; load: () => Promise<Run> }> = {
  "sandbox-server": {
    summary: "run the sandbox server (one per container, N isolated slots)",
    load: async () => (await import("./sandbox-server.js")).run,
  },
  job: {
    summary: "job render --format json|hcl: print the sandbox job",
    load: async () => (await import("./job.js")).run,
  },
  jobs: {
    summary: "jobs prune [--dry-run]: find and stop slotpool jobs left behind by crashed runs",
    load: async () => (await import("./jobs.js")).run,
  },
  "executor-server": {
    summary: "run the tool executor as an HTTP service",
    load: async () => (await import("./executor-server.js")).run,
  },
  "e2b-server": {
    summary: "serve an E2B-compatible API over a slot pool (E2B SDK code runs on slots)",
    load: async () => (await import("./e2b-server.js")).run,
  },
  "openenv-server": {
    summary: "serve an env as an OpenEnv environment (/ws), its tools over MCP (/mcp), rollouts on a trainer's model (/run)",
    load: async () => (await import("./openenv-server.js")).run,
  },
  "tool-server": {
    summary: "host external tools (credentials stay in this process)",
    load: async () => (await import("./tool-server.js")).run,
  },
  process: {
    summary: "run an env and write scored groups to JSONL",
    load: async () => (await import("./run-env.js")).runProcess,
  },
  serve: {
    summary: "run an env and feed an Atropos trainer",
    load: async () => (await import("./run-env.js")).runServe,
  },
  evaluate: {
    summary: "run an env's evaluation and write metrics and samples",
    load: async () => (await import("./run-env.js")).runEvaluate,
  },
  view: {
    summary: "view FILE.jsonl [--serve]: the HTML report of a run's rollouts",
    load: async () => (await import("./view.js")).run,
  },
  status: {
    summary: "print pool and job state for an operator",
    load: async () => (await import("./status.js")).run,
  },
};

/** The package's version: package.json sits two levels above src/cli/ (three above dist/src/cli/). */
function version(): string {
  for (const rel of ["../../package.json", "../../../package.json"]) {
    try {
      const pkg = JSON.parse(readFileSync(new URL(rel, import.meta.url), "utf8")) as { name?: string; version?: string };
      if (pkg.name === "slotpool" && pkg.version) return pkg.version;
    } catch {
      // not at this level
    }
  }
  return "unknown";
}

function usage(): string {
  const width = Math.max(...Object.keys(COMMANDS).map((c) => c.length));
  const lines = Object.entries(COMMANDS).map(([name, c]) => `  ${name.padEnd(width)}  ${c.summary}`);
  return `usage: slotpool <command> [options]\n       slotpool --version\n\ncommands:\n${lines.join("\n")}\n\nRun 'slotpool <command> --help' for a command's options.\nExit codes: 0 done as asked, 1 the command failed (the last line says why), 2 a usage error, 130 interrupted.\n`;
}

async function main(argv: string[]): Promise<number> {
  const [name, ...rest] = argv;
  if (name === "--version" || name === "-V" || name === "version") {
    process.stdout.write(`slotpool ${version()}\n`);
    return 0;
  }
  if (!name || name === "--help" || name === "-h" || name === "help") {
    process.stdout.write(usage());
    return name ? 0 : 2;
  }
  const command = COMMANDS[name];
  if (!command) {
    process.stderr.write(`slotpool: unknown command '${name}'\n\n${usage()}`);
    return 2;
  }
  try {
    const run = await command.load();
    const code = await run(rest);
    return typeof code === "number" ? code : 0;
  } catch (err) {
    if (err instanceof CliUsageError) {
      process.stderr.write(`slotpool ${name}: ${err.message}\n`);
      return 2;
    }
    process.stderr.write(`slotpool ${name}: ${err instanceof Error ? err.message : String(err)}\n`);
    if (process.env["SLOTPOOL_DEBUG"] && err instanceof Error && err.stack) process.stderr.write(err.stack + "\n");
    return 1;
  }
}

main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
  },
  (err: unknown) => {
    process.stderr.write(`slotpool: ${String(err)}\n`);
    process.exitCode = 1;
  },
);
