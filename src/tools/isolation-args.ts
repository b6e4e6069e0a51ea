/**
 * Isolation arguments decide how much a sandbox command may do (network, fail-closed
 * isolation). They come from env/executor config only: a model that writes them into its
 * tool call must not be able to loosen its isolation, so they are removed from every call.
 */
export const ISOLATION_ARG_NAMES = ["allow_network", "require_sandbox", "require_stateful_sandbox"] as const;
export type IsolationArgName = (typeof ISOLATION_ARG_NAMES)[number];

const ISOLATION_ARG_SET: ReadonlySet<string> = new Set(ISOLATION_ARG_NAMES);

export function isIsolationArg(name: string): name is IsolationArgName {
  return ISOLATION_ARG_SET.has(name);
}

/** A copy of `args` without isolation arguments, and the names that were removed. */
export function stripIsolationArgs(args: Record<string, unknown>): { args: Record<string, unknown>; stripped: IsolationArgName[] } {
  const out: Record<string, unknown> = {};
  const stripped: IsolationArgName[] = [];
  for (const [key, value] of Object.entries(args)) {
    if (isIsolationArg(key)) stripped.push(key);
    else out[key] = value;
  }
  return { args: out, stripped };
}
