/**
 * The base of every error slotpool raises on purpose. `code` is stable and meant to be
 * matched on (messages are for people and may change): "SLOT_LOST" for SlotLostError,
 * "NOMAD_UNREACHABLE" for NomadUnreachableError — the class name in upper snake case,
 * without "Error". It lives with the protocol because every room may import it.
 */
export class SlotpoolError extends Error {
  readonly code: string;

  constructor(message?: string, options?: { cause?: unknown; code?: string }) {
    super(message, options);
    this.code = options?.code ?? errorCode(new.target.name);
  }
}

/** "SlotLostError" → "SLOT_LOST". */
export function errorCode(className: string): string {
  return className
    .replace(/Error$/, "")
    .replace(/([a-z0-9])([A-Z])/g, "$1_$2")
    .replace(/([A-Z])([A-Z][a-z])/g, "$1_$2")
    .toUpperCase();
}

/** zod issues of a config object as one line: "field: problem; other.field: problem" ("(config)" for the whole object). */
export function configProblems(issues: ReadonlyArray<{ path: ReadonlyArray<PropertyKey>; message: string }>): string {
  return issues.map((i) => `${i.path.map(String).join(".") || "(config)"}: ${i.message}`).join("; ");
}
