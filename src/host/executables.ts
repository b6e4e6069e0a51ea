import { existsSync } from "node:fs";

/**
 * Where a system tool is (bubblewrap, util-linux's unshare and setpriv, slirp4netns, ip, a C
 * compiler): first on PATH, then in the usual system dirs (a server started with a bare
 * environment still finds them), or null.
 */
export function findExecutable(name: string): string | null {
  for (const dir of (process.env["PATH"] ?? "/usr/bin:/bin").split(":")) {
    const p = `${dir}/${name}`;
    if (dir && existsSync(p)) return p;
  }
  for (const p of [`/usr/bin/${name}`, `/bin/${name}`, `/usr/local/bin/${name}`]) if (existsSync(p)) return p;
  return null;
}
