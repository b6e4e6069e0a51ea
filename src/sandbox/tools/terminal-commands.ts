import { IMAGE_BASH } from "../isolation/isolation.js";
import { IMAGE_TMUX, IMAGE_TOOLS_BIN } from "../images/image-tools.js";

/**
 * The terminal's commands in an image root (`imagePath`: the image's PATH; undefined: the
 * host's system view), where the image may have no mkdir, cat, timeout, tmux or bash.
 */

/**
 * What every helper script of the terminal starts with: in an image root the image tools'
 * busybox first on PATH, whose tmux passes its own locale settings on to its server; the
 * terminal's shell gets the image's PATH back and none of those (`terminalShell`).
 */
export function terminalPrologue(imagePath: string | undefined): string {
  return imagePath !== undefined ? `export PATH=${IMAGE_TOOLS_BIN}:"$PATH"\n` : "";
}

/** The terminal's shell: bash without profile; in an image root the static one, with the image's own environment. */
export function terminalShell(imagePath: string | undefined): string {
  if (imagePath === undefined) return "exec bash --noprofile --norc";
  return `exec ${IMAGE_TOOLS_BIN}/env -u LOCPATH -u TERMINFO -u LC_ALL PATH='${imagePath.replace(/'/g, `'\\''`)}' ${IMAGE_BASH} --noprofile --norc`;
}

/** tmux: the host's, or in an image root the image tools' (the host's binary with its own loader and libraries). */
export function terminalTmux(imagePath: string | undefined): string {
  return imagePath !== undefined ? IMAGE_TMUX : "tmux";
}
