import { chmod, chown, mkdir, writeFile } from "node:fs/promises";
import { closeSync } from "node:fs";
import { join } from "node:path";
import type { Stats } from "node:fs";
import type { ImageRuntime } from "../../protocol/images.js";
import type { ImageConfig } from "./oci-layout.js";
import { existingPrefixes, openInRoot, readInRoot } from "./root-paths.js";
import { SANDBOX_HOSTNAME } from "../isolation/isolation.js";
import { IMAGE_UID_SPAN } from "../../host/slot-uid-blocks.js";

/**
 * What an image's config means for a slot, the way a container runtime reads it: `Env`
 * (PATH defaulted as Docker does), `User` (a name or uid, `:group` optional, looked up in the
 * image's own /etc/passwd and /etc/group), HOME from the user's passwd entry, and `WorkingDir`
 * (created when the image lacks it, owned by the image's user, as a tiny extra layer on top,
 * so a reset never has to make it).
 */

/** Docker's PATH for an image that sets none. */
export const DEFAULT_IMAGE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

export class ImageUserError extends Error {
  override name = "ImageUserError";
}

interface Entry {
  name: string;
  id: number;
  gid?: number;
  home?: string;
}

function table(text: string | undefined, passwd: boolean): Entry[] {
  const out: Entry[] = [];
  for (const line of (text ?? "").split("\n")) {
    const f = line.split(":");
    if (f.length < 3 || !/^\d+$/.test(f[2]!)) continue;
    out.push({ name: f[0]!, id: Number(f[2]), ...(passwd && /^\d+$/.test(f[3] ?? "") ? { gid: Number(f[3]) } : {}), ...(passwd && f[5] ? { home: f[5] } : {}) });
  }
  return out;
}

/**
 * The runtime of an image whose merged root is readable at `rootDir` (a read-only view of its
 * layers). `root`: whether the server is root (else the slot's only uid is 0: see
 * docs/images.md, "A server that is not root").
 */
export function imageRuntime(rootDir: string, config: ImageConfig, root: boolean): ImageRuntime {
  const passwd = table(readInRoot(rootDir, "etc/passwd"), true);
  const group = table(readInRoot(rootDir, "etc/group"), false);
  const [userPart = "", groupPart] = config.user.split(":");
  let uid = 0;
  let gid = 0;
  let entry: Entry | undefined;
  if (userPart !== "") {
    entry = /^\d+$/.test(userPart) ? passwd.find((e) => e.id === Number(userPart)) : passwd.find((e) => e.name === userPart);
    if (!entry && !/^\d+$/.test(userPart)) throw new ImageUserError(`the image's User '${userPart}' is not in its /etc/passwd`);
    uid = /^\d+$/.test(userPart) ? Number(userPart) : entry!.id;
    gid = entry?.gid ?? 0;
  } else {
    entry = passwd.find((e) => e.id === 0);
  }
  if (groupPart !== undefined && groupPart !== "") {
    const g = /^\d+$/.test(groupPart) ? Number(groupPart) : group.find((e) => e.name === groupPart)?.id;
    if (g === undefined) throw new ImageUserError(`the image's User names the group '${groupPart}', which is not in its /etc/group`);
    gid = g;
  }
  if (uid >= IMAGE_UID_SPAN || gid >= IMAGE_UID_SPAN) throw new ImageUserError(`the image's User is ${uid}:${gid}; a slot maps uids and gids 0-${IMAGE_UID_SPAN - 1} only`);
  const home = entry?.home ?? (uid === 0 ? "/root" : "/");
  const env = [...config.env];
  if (!env.some((e) => e.startsWith("PATH="))) env.unshift(`PATH=${DEFAULT_IMAGE_PATH}`);
  if (!env.some((e) => e.startsWith("HOME="))) env.push(`HOME=${home}`);
  return {
    env,
    working_dir: config.workingDir || "/",
    user: config.user,
    // Not root: one uid, uid 0 inside (the user's HOME and name stay the image's).
    uid: root ? uid : 0,
    gid: root ? gid : 0,
    home,
  };
}

/**
 * The image's extra layer, on top of its own (built once per container, in `layerDir`, empty,
 * created by the caller): the directories a slot's sandbox needs whatever the image holds, so
 * that no reset has to make them and none is made with the wrong mode: `/run/slotpool` (where
 * the static tools are mounted: reachable by any user of the image) and the image's
 * WorkingDir when it lacks it (Docker makes it too), the missing parts 0755 and the image
 * user's. A directory the image has keeps its mode and owner (the layer's copy would
 * otherwise shadow them); a path through a symlink of the image is left to the image (a
 * directory here would shadow the link). Returns false when there is nothing to add.
 */
export async function extraLayer(rootDir: string, runtime: ImageRuntime, layerDir: string, root: boolean): Promise<boolean> {
  let made = false;
  for (const [path, owner] of [["/run/slotpool", { uid: 0, gid: 0 }], [runtime.working_dir, { uid: runtime.uid, gid: runtime.gid }]] as const) {
    const { parts, existing, symlink } = existingPrefixes(rootDir, path);
    if (existing.length === parts.length || symlink) continue;
    let dir = layerDir;
    for (let i = 0; i < parts.length; i++) {
      dir = join(dir, parts[i]!);
      try {
        await mkdir(dir);
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code === "EEXIST") continue;
        throw err;
      }
      const st: Stats | undefined = existing[i];
      await chmod(dir, st ? st.mode & 0o7777 : 0o755);
      if (root) await chown(dir, st ? st.uid : owner.uid, st ? st.gid : owner.gid);
    }
    made = true;
  }
  // Docker's /etc/hosts where the image has none (mmdebstrap's minbase, scratch images): without
  // it `localhost` does not resolve (Jupyter's server binds "localhost"). In the layer, below the
  // slot's upper one, root may still change it (the change is the slot's, gone at reset, and
  // never part of a built layer).
  const hosts = existingPrefixes(rootDir, "/etc/hosts");
  // /etc a directory or missing (not a file, not a link), /etc/hosts missing (not a dangling link either).
  if (!hosts.symlink && (hosts.existing.length === 1 || !inRoot(rootDir, "etc")) && !inRoot(rootDir, "etc/hosts")) {
    const etc = join(layerDir, "etc");
    await mkdir(etc, { recursive: true });
    const st: Stats | undefined = hosts.existing[0];
    await chmod(etc, st ? st.mode & 0o7777 : 0o755);
    if (root) await chown(etc, st ? st.uid : 0, st ? st.gid : 0);
    await writeFile(join(etc, "hosts"), HOSTS, { mode: 0o644 });
    if (root) await chown(join(etc, "hosts"), 0, 0);
    made = true;
  }
  return made;
}

function inRoot(rootDir: string, path: string): boolean {
  const opened = openInRoot(rootDir, path);
  if (opened) closeSync(opened.fd);
  return opened !== undefined;
}

/** Docker's /etc/hosts of a container (its address line aside): localhost both ways and the sandbox's host name. */
const HOSTS = `127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n127.0.1.1\t${SANDBOX_HOSTNAME}\n`;
