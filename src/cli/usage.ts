import { parseArgs, type ParseArgsConfig } from "node:util";
import { SlotpoolError } from "../protocol/errors.js";
import { nearestName } from "../protocol/config-keys.js";

/** A mistake in the command line: printed without a stack, exit code 2. */
export class CliUsageError extends SlotpoolError {
  override name = "CliUsageError";
}

type Options = NonNullable<ParseArgsConfig["options"]>;

/**
 * `node:util` parseArgs with errors turned into CliUsageError and `--help` handled:
 * returns null after printing help.
 */
export interface ParsedFlags {
  values: Record<string, string | boolean | Array<string | boolean> | undefined>;
  positionals: string[];
}

export function parseFlags(argv: string[], options: Options, help: string, allowPositionals = false): ParsedFlags | null {
  let parsed: ParsedFlags;
  try {
    parsed = parseArgs({
      args: argv,
      options: { ...options, help: { type: "boolean", short: "h" } },
      allowPositionals,
      strict: true,
    });
  } catch (err) {
    // The usage line and where the options are, not the whole help: the error stays readable.
    const usageLine = help.split("\n")[0] ?? "";
    const command = /^usage: (slotpool \S+)/.exec(usageLine)?.[1] ?? "the command";
    const message = err instanceof Error ? err.message : String(err);
    // A misspelt flag gets the nearest one, as a misspelt config key does.
    const unknown = /^Unknown option '--([^'=]+)'/.exec(message)?.[1];
    const near = unknown ? nearestName(unknown, Object.keys(options)) : undefined;
    const first = unknown ? `Unknown option '--${unknown}'${near ? ` (did you mean '--${near}'?)` : ""}` : message;
    throw new CliUsageError(`${first}\n${usageLine}\nRun '${command} --help' for its options.`);
  }
  if (parsed.values["help"]) {
    process.stdout.write(help.endsWith("\n") ? help : help + "\n");
    return null;
  }
  return parsed;
}

/** Parses a flag that must be a whole number in [min, max]; names the flag on error. */
export function intFlag(name: string, value: string | undefined, fallback: number, min = 0, max = Number.MAX_SAFE_INTEGER): number {
  if (value === undefined) return fallback;
  if (!/^-?\d+$/.test(value)) throw new CliUsageError(`--${name} must be a whole number, got '${value}'`);
  const n = Number(value);
  if (n < min || n > max) throw new CliUsageError(`--${name} must be between ${min} and ${max}, got ${n}`);
  return n;
}

/** A string flag's value (the last one when repeated), or undefined. */
export function stringFlag(flags: ParsedFlags, name: string): string | undefined {
  const v = flags.values[name];
  if (Array.isArray(v)) return v.length ? String(v[v.length - 1]) : undefined;
  return typeof v === "string" ? v : undefined;
}

/** Whether a boolean flag was given. */
export function boolFlag(flags: ParsedFlags, name: string): boolean {
  return flags.values[name] === true;
}

/** Every value of a repeatable string flag (`multiple: true`), in order. */
export function listFlag(flags: ParsedFlags, name: string): string[] {
  const v = flags.values[name];
  if (Array.isArray(v)) return v.map(String);
  return typeof v === "string" ? [v] : [];
}
