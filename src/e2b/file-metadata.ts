import type { IncomingHttpHeaders } from "node:http";
import { E2bApiError } from "./errors.js";

/**
 * E2B's file metadata: string pairs stored as user extended attributes `user.e2b.<key>` on
 * the file (envd ≥ 0.6.2). An upload sends them as `X-Metadata-<key>` headers (key
 * lowercased, first value kept); Stat, ListDir, Move and the upload's answer surface every
 * `user.e2b.*` attribute of the file, whoever set it (a command's `setfattr` too). The slot's
 * own tools read and write them (`getfattr`/`setfattr`, Debian's `attr`), inside the sandbox
 * as the slot's uid, so they work wherever the sandbox's filesystem keeps user xattrs: the
 * slot's tmpfs (Linux ≥ 6.6), a template's overlay, a plain directory on ext4/xfs.
 */

export type FileMetadata = Record<string, string>;

const PREFIX = "x-metadata-";
/** envd's bounds: a key fits the VFS xattr-name limit (255) after `user.e2b.`, all of a file's metadata in 4096 bytes. */
const MAX_KEY = 246;
const MAX_TOTAL = 4096;
const ATTR_PREFIX = "user.e2b.";
const PRINTABLE = /^[\x20-\x7e]*$/;

/** The metadata an upload's headers carry (undefined: none), or a 400 naming the bad key. */
export function metadataFromHeaders(headers: IncomingHttpHeaders): FileMetadata | undefined {
  let meta: FileMetadata | undefined;
  let total = 0;
  for (const [name, value] of Object.entries(headers)) {
    if (!name.startsWith(PREFIX) || value === undefined) continue;
    const key = name.slice(PREFIX.length);
    if (key === "") continue;
    // Node joins repeated headers with ", " (and keeps arrays for a few): envd keeps the first.
    const v = Array.isArray(value) ? value[0]! : value;
    if (key.length > MAX_KEY) throw new E2bApiError(400, `metadata key '${key.slice(0, 40)}…' is ${key.length} bytes, above the limit of ${MAX_KEY}`, "metadata");
    if (!PRINTABLE.test(v)) throw new E2bApiError(400, `metadata value of '${key}' must be printable US-ASCII`, "metadata");
    total += ATTR_PREFIX.length + key.length + v.length;
    if (total > MAX_TOTAL) throw new E2bApiError(400, `the file's metadata is above the limit of ${MAX_TOTAL} bytes (keys, values and the 'user.e2b.' prefix of each key)`, "metadata");
    (meta ??= {})[key] = v;
  }
  return meta;
}

/** `setfattr` arguments for a key/value pair ("" stays "", anything else as hex: setfattr reads 0x/0s/quoted values specially). */
export function setfattrPair(key: string, value: string): [string, string] {
  return [ATTR_PREFIX + key, value === "" ? "" : "0x" + Buffer.from(value, "latin1").toString("hex")];
}

/**
 * The command printing the `user.e2b.*` attributes of the paths after it as a hex dump (only
 * files that have some; symlinks themselves, not their targets). Callers silence its errors:
 * where the tool is missing or a file vanished meanwhile, metadata is absent, entries stay.
 */
export const GETFATTR = `getfattr -h --absolute-names -d -m '^user\\.e2b\\.' -e hex`;

/** Splits getfattr's dump (`# file: <path>` then `user.e2b.<key>=0x<hex>` lines) into metadata by path. */
export function parseXattrDump(dump: Buffer): Map<string, FileMetadata> {
  const out = new Map<string, FileMetadata>();
  let current: FileMetadata | undefined;
  // latin1 keeps every byte as one char, so getfattr's octal escapes decode to the name's bytes.
  for (const line of dump.toString("latin1").split("\n")) {
    if (line.startsWith("# file: ")) {
      const name = Buffer.from(line.slice(8).replace(/\\([0-7]{3})/g, (_, o: string) => String.fromCharCode(parseInt(o, 8))), "latin1").toString("utf8");
      current = {};
      out.set(name, current);
      continue;
    }
    const eq = line.indexOf("=");
    if (!current || !line.startsWith(ATTR_PREFIX) || eq < 0) continue;
    const raw = line.slice(eq + 1);
    current[line.slice(ATTR_PREFIX.length, eq)] = raw.startsWith("0x") ? Buffer.from(raw.slice(2), "hex").toString("utf8") : raw;
  }
  return out;
}
