/**
 * Policy arguments decide how much a sandbox command may do (network, fail-closed
 * isolation). They come from env/executor config only: a model that writes them into its
 * tool call must not be able to loosen the policy, so they are removed from every call.
 */
export const POLICY_ARG_NAMES = ["allow_network", "require_sandbox", "require_stateful_sandbox"] as const;
export type PolicyArgName = (typeof POLICY_ARG_NAMES)[number];

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
