/** What a fork's child takes over of its parent's terminal (stateful.ts), and how it is read. */

/** A terminal's working directory and exported environment (`export -p` lines), for a fork's child. */
export interface TerminalState {
  cwd: string;
  env: string;
}

/** Variables that belong to one shell or one tmux pane, never carried into another terminal. */
const PER_SHELL = new Set(["PWD", "OLDPWD", "SHLVL", "TMUX", "TMUX_PANE", "SLOTPOOL_N", "_"]);

/** `export -p` output without the per-shell variables (a value may span lines). */
export function keepExports(text: string): string {
  const out: string[] = [];
  let keep = false;
  for (const line of text.split("\n")) {
    const m = /^declare -[-a-zA-Z]* ([A-Za-z_][A-Za-z0-9_]*)/.exec(line);
    if (m) keep = !PER_SHELL.has(m[1]!);
    if (keep) out.push(line);
  }
  return out.join("\n") + (out.length ? "\n" : "");
}
