import { SlotpoolError } from "../protocol/errors.js";

/** A request the server refuses: sent as HTTP `status` with `{error, field?}` (plus `answerFields`, e.g. a machine-readable `code`). */
export class HttpError extends SlotpoolError {
  override name = "HttpError";
  constructor(
    readonly status: number,
    message: string,
    readonly field?: string,
    readonly answerFields?: Readonly<Record<string, unknown>>,
  ) {
    super(message);
  }
}

/** zod issue path → dotted field name (`args.command`, `3.slot_id`). */
export function fieldName(path: ReadonlyArray<PropertyKey>, prefix?: string): string {
  const parts = [...(prefix ? [prefix] : []), ...path.map((p) => String(p))];
  return parts.join(".") || "body";
}
