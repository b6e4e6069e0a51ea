import { fileURLToPath } from "node:url";

/** slotpool's own sources (src/ or dist/src/ of this package): frames there are not the env's. */
const OWN_SOURCES = fileURLToPath(new URL("..", import.meta.url));

/** A frame of slotpool, Node or a dependency, as opposed to one of the env author's code. */
function isOwnFrame(frame: string): boolean {
  return frame.includes(OWN_SOURCES) || /\(node:|at node:|[/\\]node_modules[/\\]/.test(frame);
}

/**
 * An error's stack with the env's own frames first (the env file's lines, where the reward or
 * hook threw), then slotpool's and Node's, so a reader of the log or the report sees the
 * author's line at once. Undefined for a value that is not an Error with a stack.
 */
export function envFramesFirst(err: unknown): string | undefined {
  if (!(err instanceof Error) || typeof err.stack !== "string") return undefined;
  const lines = err.stack.split("\n");
  const first = lines.findIndex((l) => /^\s+at /.test(l));
  if (first < 0) return err.stack;
  const head = lines.slice(0, first);
  // Frames of no file (`at async Promise.allSettled (index 3)`) say nothing to the author, and
  // would make the same failure of two trajectories look like two.
  const frames = lines.slice(first).filter((l) => /^\s+at /.test(l) && /[/\\]/.test(l));
  const env = frames.filter((f) => !isOwnFrame(f));
  const own = frames.filter((f) => isOwnFrame(f));
  if (env.length === 0 || own.length === 0) return err.stack;
  return [...head, ...env, `    … then ${own.length} frame${own.length === 1 ? "" : "s"} of slotpool and node:`, ...own].join("\n");
}
