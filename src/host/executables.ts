import { existsSync } from "node:fs";

/**
 * Where a system tool is (bubblewrap, util-linux's unshare and setpriv, slirp4netns, ip, a C
 * compiler, nft): first on PATH, then in the usual system dirs (a server started with a bare
 * environment still finds them), or null.
 */
export function findExecutable(name: string): string | null {
  for (const dir of (process.env["PATH"] ?? "/usr/bin:/bin").split(":")) {
    const p = `${dir}/${name}`;
    if (dir && existsSync(p)) return p;
  }
  // sbin too: a user's PATH often lacks it, and tools a non-root server runs in namespaces of its own live there (nft).
  for (const p of [`/usr/bin/${name}`, `/bin/${name}`, `/usr/local/bin/${name}`, `/usr/sbin/${name}`, `/sbin/${name}`]) if (existsSync(p)) return p;
  return null;
}
