import { destination, pino, type DestinationStream, type Logger, type LoggerOptions } from "pino";
import { RepeatedLines } from "./repeated-lines.js";

export type { Logger };

/**
 * Keys whose values never reach a log line: tokens protect every sandbox and service,
 * and a log shipped to a shared store must not hand them out.
 */
export const REDACTED_PATHS = [
  "token",
  "*.token",
  "authorization",
  "*.authorization",
  "headers.authorization",
  "*.headers.authorization",
  'headers["x-nomad-token"]',
  '*.headers["x-nomad-token"]',
  "secret",
  "*.secret",
  "apiKey",
  "*.apiKey",
  "api_key",
  "*.api_key",
];

export type LogFormat = "json" | "pretty";
export const LOG_FORMATS: readonly LogFormat[] = ["json", "pretty"];

export interface CreateLoggerOptions {
  name: string;
  level?: LoggerOptions["level"];
  /** Where lines go; defaults to stderr so stdout stays free for command output. */
  destination?: NodeJS.WritableStream;
  /**
   * `json` (pino lines, for machines) or `pretty` (one short line per entry, for people).
   * Default: pretty when the lines go to stderr and it is a terminal, else json. (Not an
   * environment variable: a child sandbox server, whose listening line is read as JSON
   * from a pipe, would inherit it.)
   */
  format?: LogFormat;
  /**
   * Write a line that repeats an earlier one (same level, message and facts, ids aside) only
   * once; `flushRepeats(logger)` then logs how many times each came ("× 48"). For the run
   * commands, where every trajectory may fail for the same cause.
   */
  collapseRepeats?: boolean;
}

const repeatsOf = new WeakMap<Logger, RepeatedLines>();

/** Logs, for each message written once but repeated since, how many times it came (see CreateLoggerOptions.collapseRepeats). */
export function flushRepeats(logger: Logger): void {
  repeatsOf.get(logger)?.flush();
}

/** The format a command's logs take by default (see CreateLoggerOptions.format). */
export function defaultLogFormat(): LogFormat {
  return process.stderr.isTTY ? "pretty" : "json";
}

/** A pino logger with secrets redacted, writing JSON lines or short readable ones. `SLOTPOOL_LOG_LEVEL` sets the level. */
export function createLogger(options: CreateLoggerOptions): Logger {
  const level = options.level ?? process.env["SLOTPOOL_LOG_LEVEL"] ?? "info";
  const format = options.format ?? (options.destination ? "json" : defaultLogFormat());
  const plain = format === "pretty" ? prettyStream(options.destination ?? process.stderr) : (options.destination ?? destination({ fd: 2, sync: false }));
  const repeats = options.collapseRepeats ? new RepeatedLines(plain) : undefined;
  const out = repeats ?? plain;
  const logger = pino(
    {
      name: options.name,
      level,
      redact: { paths: REDACTED_PATHS, censor: "[redacted]" },
      base: { pid: process.pid },
    },
    out as DestinationStream,
  );
  if (repeats) repeatsOf.set(logger, repeats);
  return logger;
}

const LEVEL_NAMES: Record<number, string> = { 10: "TRACE", 20: "DEBUG", 30: "INFO", 40: "WARN", 50: "ERROR", 60: "FATAL" };
/** Keys every line has, or that say nothing to a reader at a terminal. */
const QUIET_KEYS = new Set(["level", "time", "pid", "hostname", "name", "msg", "v"]);
const VALUE_CHARS = 160;

/** One pino JSON line as `12:04:31 WARN  message  key=value …` (local time, values cut short). */
export function formatPrettyLine(json: string): string {
  let entry: Record<string, unknown>;
  try {
    entry = JSON.parse(json) as Record<string, unknown>;
  } catch {
    return json.endsWith("\n") ? json : json + "\n";
  }
  const time = typeof entry["time"] === "number" ? new Date(entry["time"]).toTimeString().slice(0, 8) : "";
  const level = (LEVEL_NAMES[Number(entry["level"])] ?? String(entry["level"])).padEnd(5);
  // A stack (a reward that threw) is read line by line, not cut short.
  const stack = typeof entry["stack"] === "string" ? `\n${entry["stack"].replace(/^/gm, "    ")}` : "";
  const fields = Object.entries(entry)
    .filter(([k]) => !QUIET_KEYS.has(k) && !(k === "stack" && stack))
    .map(([k, v]) => {
      let text = typeof v === "string" ? v : JSON.stringify(v);
      if (text.length > VALUE_CHARS) text = text.slice(0, VALUE_CHARS - 1) + "…";
      return `${k}=${/\s/.test(text) && typeof v === "string" ? JSON.stringify(text) : text}`;
    });
  return `${time} ${level} ${String(entry["msg"] ?? "")}${fields.length ? `  ${fields.join(" ")}` : ""}${stack}\n`;
}

function prettyStream(out: NodeJS.WritableStream): { write(line: string): boolean } {
  // On a terminal, clear the line first: a progress bar redrawn in place may be on it.
  const clear = (out as NodeJS.WriteStream).isTTY ? "\r\x1b[2K" : "";
  return { write: (line: string) => out.write(clear + formatPrettyLine(line.trimEnd())) };
}

/** A logger that drops everything (library default when the caller gives none). */
export function silentLogger(): Logger {
  return pino({ level: "silent" });
}
