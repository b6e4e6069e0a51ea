import { IMAGE_TOOLS_BIN } from "../images/image-tools.js";

/**
 * The shell scripts an image build's WORKDIR, USER and COPY steps run as root in the image
 * (service/image-build.ts), after E2B's builder's own (github:e2b-dev/infra,
 * orchestrator/pkg/template/build/commands): written for the image tools' busybox and bash,
 * so they work in any image, and with owners looked up in the image's own /etc/passwd and
 * /etc/group (numeric ids to chown: the static busybox reads no NSS).
 */

const BB = `${IMAGE_TOOLS_BIN}/busybox`;

function q(s: string): string {
  return `'${s.replace(/'/g, `'\\''`)}'`;
}

/** `ids USER[:GROUP]` prints uid:gid from the image's files (a number stays a number), or fails naming the unknown one. */
const IDS = [
  `ids() { local u=\${1%%:*} g=\${1#*:} uid gid;`,
  ` [ "$g" = "$1" ] && g=$u;`,
  ` uid=$(${BB} awk -F: -v n="$u" '$1==n||$3==n{print $3; exit}' /etc/passwd 2>/dev/null);`,
  ` [ -n "$uid" ] || case $u in (*[!0-9]*|"") echo "unable to find user $u: no matching entries in passwd file" >&2; return 1;; (*) uid=$u;; esac;`,
  ` gid=$(${BB} awk -F: -v n="$g" '$1==n||$3==n{print $3; exit}' /etc/group 2>/dev/null);`,
  ` [ -n "$gid" ] || case $g in (*[!0-9]*|"") gid=$(${BB} awk -F: -v n="$u" '$1==n||$3==n{print $4; exit}' /etc/passwd 2>/dev/null); [ -n "$gid" ] || { echo "unable to find group $g" >&2; return 1; };; (*) gid=$g;; esac;`,
  ` echo "$uid:$gid"; }`,
].join("");

/** WORKDIR: makes the directory if missing, owned by the current user from the first directory made down (E2B's). */
export function workdirScript(target: string, user: string): string {
  return [
    IDS,
    `t=${q(target)}; [ -d "$t" ] && exit 0; o=$(ids ${q(user)}) || exit 1;`,
    `first=""; c="$t"; while [ ! -d "$c" ]; do first="$c"; c=$(${BB} dirname "$c"); done;`,
    `${BB} mkdir -p "$t" && ${BB} chown -R "$o" "$first"`,
  ].join("\n");
}

/** USER: makes the user unless the image has it: useradd where the image has it, else an entry of its own (uid ≥ 1000) and a home. */
export function userScript(name: string): string {
  if (!/^[A-Za-z0-9._][A-Za-z0-9._-]{0,31}$/.test(name)) return `echo ${q(`invalid user name: ${name}`)} >&2; exit 1`;
  return [
    `${BB} awk -F: -v n=${q(name)} '$1==n{f=1} END{exit !f}' /etc/passwd 2>/dev/null && exit 0`,
    `case ${q(name)} in (*[!0-9]*) ;; (*) exit 0;; esac`,
    `if command -v useradd >/dev/null 2>&1; then exec useradd --create-home --shell /bin/bash ${q(name)}; fi`,
    `uid=$(${BB} awk -F: 'BEGIN{m=999} $3>=1000 && $3<60000 && $3>m{m=$3} END{print m+1}' /etc/passwd)`,
    `echo ${q(name)}":x:$uid:$uid::/home/"${q(name)}":/bin/sh" >> /etc/passwd && echo ${q(name)}":x:$uid:" >> /etc/group`,
    `${BB} mkdir -p /home/${q(name)} && ${BB} chown "$uid:$uid" /home/${q(name)}`,
  ].join("\n");
}

/**
 * COPY: `source` (unpacked in the slot's /tmp) to `target` (relative: to the working
 * directory, or the user's home when none is set), owned by `owner`, with `mode` if given. A
 * file or a symlink is moved to the exact path (into it when it ends in '/'); a directory's
 * contents are merged into the target (Docker's COPY).
 */
export function copyScript(o: { source: string; target: string; owner: string; mode: string; workdir: string | undefined; user: string }): string {
  return [
    IDS,
    `src=${q(o.source)}; target=${q(o.target)}; perms=${q(o.mode)}`,
    o.workdir !== undefined ? `cd -- ${q(o.workdir)} 2>/dev/null || cd /` : `home=$(${BB} awk -F: -v n=${q(o.user)} '$1==n{print $6; exit}' /etc/passwd); cd -- "\${home:-/}" 2>/dev/null || cd /`,
    `case $target in (/*) ;; (*) target="$(pwd)/$target";; esac`,
    `[ -e "$src" ] || [ -L "$src" ] || { echo "Error: source path does not exist: $src" >&2; exit 1; }`,
    `own=$(ids ${q(o.owner)}) || exit 1`,
    `parent() { case $target in (*/) ${BB} mkdir -p "$target";; (*) ${BB} mkdir -p "$(${BB} dirname "$target")";; esac; }`,
    `if [ -L "$src" ]; then parent && ${BB} chown -h "$own" "$src" && ${BB} mv -f "$src" "$target"`,
    `elif [ -f "$src" ]; then ${BB} chown "$own" "$src" && { [ -z "$perms" ] || ${BB} chmod "$perms" "$src"; } && parent && ${BB} mv -f "$src" "$target"`,
    `elif [ -d "$src" ]; then ${BB} chown -R "$own" "$src" && { [ -z "$perms" ] || ${BB} chmod -R "$perms" "$src"; } && ${BB} mkdir -p "$target" && ${BB} cp -a "$src/." "$target/"`,
    `else echo "Error: $src is neither a file, a directory nor a symlink" >&2; exit 1; fi`,
  ].join("\n");
}
