import { ExecuteRequestSchema } from "../../protocol/sandbox.js";
import { TOOL_TABLE, builtinTool, type BuiltinToolName } from "../../protocol/tool-table.js";
import { HttpError, fieldName } from "../../http/errors.js";
import type { Slot } from "../core/slot.js";

/** A validated call, ready to run on its slot. */
export interface ParsedCall {
  slot: Slot;
  /** Canonical (the table's name, aliases resolved). */
  tool: BuiltinToolName;
  args: Record<string, unknown>;
  executionId: string | null;
  timeoutS: number | undefined;
  /** The slot generation the caller holds, if it named one (Slot.generation). */
  generation: number | undefined;
}

/** What an unknown tool's 400 lists: every name and alias of the tool table. */
const KNOWN_TOOLS = TOOL_TABLE.map((t) => [t.name, ...t.aliases].join("/")).join(", ");

/**
 * Validates one execute body against the tool table (400 naming the field; `prefix` names its
 * position inside a batch) and finds its slot (`slotById`: 404 for an unknown one).
 */
export function parseCall(body: unknown, prefix: string | undefined, slotById: (id: string, field: string) => Slot): ParsedCall {
  const env = ExecuteRequestSchema.safeParse(body);
  if (!env.success) {
    const issue = env.error.issues[0]!;
    throw new HttpError(400, `invalid request: ${issue.message}`, fieldName(issue.path, prefix));
  }
  const req = env.data;
  // Old clients may still send an alias; the executor sends the canonical name.
  const entry = builtinTool(req.tool);
  if (!entry) {
    throw new HttpError(400, `unknown tool '${req.tool}': expected one of ${KNOWN_TOOLS}`, fieldName(["tool"], prefix));
  }
  const tool = entry.name;
  const args = entry.args.safeParse(req.args);
  if (!args.success) {
    const issue = args.error.issues[0]!;
    throw new HttpError(400, `invalid args for ${tool}: ${issue.message}`, fieldName(["args", ...issue.path], prefix));
  }
  const slot = slotById(req.slot_id, fieldName(["slot_id"], prefix));
  return {
    slot,
    tool,
    args: args.data as Record<string, unknown>,
    executionId: req.execution_id ?? null,
    timeoutS: req.timeout,
    generation: req.generation,
  };
}
