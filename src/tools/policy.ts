import { POLICY_ARG_NAMES, type PolicyArgName } from "../protocol/tool-table.js";

/**
 * Policy arguments (named in the tool table, `protocol/tool-table.ts`) come from env/executor
 * config only: a model that writes them into its tool call must not be able to loosen the
 * policy, so they are removed from every call, whatever the tool.
 */
export { POLICY_ARG_NAMES, type PolicyArgName };

const POLICY_SET: ReadonlySet<string> = new Set(POLICY_ARG_NAMES);

export function isPolicyArg(name: string): name is PolicyArgName {
  return POLICY_SET.has(name);
}

/** A copy of `args` without policy arguments, and the names that were removed. */
export function stripPolicyArgs(args: Record<string, unknown>): { args: Record<string, unknown>; stripped: PolicyArgName[] } {
  const out: Record<string, unknown> = {};
  const stripped: PolicyArgName[] = [];
  for (const [key, value] of Object.entries(args)) {
    if (isPolicyArg(key)) stripped.push(key);
    else out[key] = value;
  }
  return { args: out, stripped };
}
