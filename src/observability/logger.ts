import { destination, pino, type DestinationStream, type Logger, type LoggerOptions } from "pino";

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

export interface CreateLoggerOptions {
  name: string;
  level?: LoggerOptions["level"];
  /** Where JSON lines go; defaults to stderr so stdout stays free for command output. */
  destination?: NodeJS.WritableStream;
}

/** A pino logger that writes JSON lines with secrets redacted. `SLOTPOOL_LOG_LEVEL` sets the level. */
export function createLogger(options: CreateLoggerOptions): Logger {
  const level = options.level ?? process.env["SLOTPOOL_LOG_LEVEL"] ?? "info";
  return pino(
    {
      name: options.name,
      level,
      redact: { paths: REDACTED_PATHS, censor: "[redacted]" },
      base: { pid: process.pid },
    },
    (options.destination ?? destination({ fd: 2, sync: false })) as DestinationStream,
  );
}

/** A logger that drops everything (library default when the caller gives none). */
export function silentLogger(): Logger {
  return pino({ level: "silent" });
}
