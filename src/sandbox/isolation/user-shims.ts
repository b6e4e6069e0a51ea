import { chmodSync, copyFileSync, existsSync, mkdirSync, readdirSync, renameSync, rmSync, statSync, writeFileSync } from "node:fs";
import { createHash } from "node:crypto";
import { join } from "node:path";

/**
 * Commands a session with its workspace at /home/NAME (E2B's /home/user) finds beside the
 * image's, for code written against E2B's sandboxes: today `sudo`, which E2B code runs
 * routinely (passwordless there). A slot has no root, so this `sudo` runs the command as
 * the same unprivileged user: `sudo apt-get …` fails the way a non-root command does,
 * not with "command not found", and `sudo cat file` just works. And `mcp-gateway`, which
 * E2B's SDKs start in a sandbox created with `mcp`: slotpool has none, so it says so and
 * fails; the SDK then kills the sandbox and raises "Failed to start MCP gateway: …" with
 * that line, as it does on an E2B template without the gateway.
 *
 * The directory is bound at SHIMS_DIR and appended to PATH. E2B's SDK runs every command
 * as `bash -l`, whose /etc/profile resets PATH; so the sandbox gets a copy of the host's
 * /etc/profile.d with one more script that appends SHIMS_DIR again.
 */
export const SHIMS_DIR = "/opt/slotpool/bin";

const SUDO = `#!/bin/sh
# slotpool: a slot has no root. This sudo runs the command as the same user (see docs/e2b.md).
while [ $# -gt 0 ]; do
  case "$1" in
    --) shift; break ;;
    -u|-g|-C|-D|-h|-p|-r|-t|-U|-T) shift 2 ;;
    -*) shift ;;
    *=*) export "$1"; shift ;;
    *) break ;;
  esac
done
if [ $# -eq 0 ]; then
  echo "usage: sudo COMMAND [ARG...] (slotpool: runs COMMAND as the same user; a slot has no root)" >&2
  exit 1
fi
exec "$@"
`;

const MCP_GATEWAY = `#!/bin/sh
echo "mcp-gateway: slotpool's sandboxes have no MCP gateway (MCP servers are not supported; see docs/e2b.md)" >&2
exit 127
`;

const PROFILE = `# slotpool: /etc/profile reset PATH; keep the E2B shims (sudo) reachable.
case ":$PATH:" in *":${SHIMS_DIR}:"*) ;; *) PATH="$PATH:${SHIMS_DIR}" ;; esac
`;

/** Marks a complete shim set of this content (a state dir kept from an older server gets the new shims). */
const READY = `ready-${createHash("sha256").update(SUDO + MCP_GATEWAY + PROFILE).digest("hex").slice(0, 12)}`;

/** Writes (once per server) the shims and the profile.d copy under stateDir; returns the bwrap arguments that bind them. */
export function userShimArgs(stateDir: string): string[] {
  const root = writeShims(stateDir);
  return ["--ro-bind", join(root, "bin"), SHIMS_DIR, ...(existsSync("/etc/profile.d") ? ["--ro-bind", join(root, "profile.d"), "/etc/profile.d"] : [])];
}

/** The shims' bin dir alone (an image root keeps its own /etc/profile.d: the host's is not bound over it). */
export function userShimBin(stateDir: string): string {
  return join(writeShims(stateDir), "bin");
}

function writeShims(stateDir: string): string {
  const root = join(stateDir, "user-shims");
  if (!existsSync(join(root, READY))) {
    const tmp = `${root}.${process.pid}.tmp`;
    rmSync(tmp, { recursive: true, force: true });
    mkdirSync(join(tmp, "bin"), { recursive: true, mode: 0o755 });
    mkdirSync(join(tmp, "profile.d"), { mode: 0o755 });
    writeFileSync(join(tmp, "bin", "sudo"), SUDO, { mode: 0o755 });
    writeFileSync(join(tmp, "bin", "mcp-gateway"), MCP_GATEWAY, { mode: 0o755 });
    if (existsSync("/etc/profile.d")) {
      for (const f of readdirSync("/etc/profile.d")) {
        const src = join("/etc/profile.d", f);
        if (statSync(src, { throwIfNoEntry: false })?.isFile()) copyFileSync(src, join(tmp, "profile.d", f));
      }
    }
    writeFileSync(join(tmp, "profile.d", "zz-slotpool-shims.sh"), PROFILE, { mode: 0o644 });
    writeFileSync(join(tmp, READY), "");
    for (const d of [tmp, join(tmp, "bin"), join(tmp, "profile.d")]) chmodSync(d, 0o755);
    rmSync(root, { recursive: true, force: true });
    renameSync(tmp, root);
  }
  return root;
}
