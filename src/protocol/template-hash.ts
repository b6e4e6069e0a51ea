import { createHash } from "node:crypto";

/**
 * The content hash of a workspace template: what builds it (setup commands and files, in a
 * canonical order). The sandbox server keys its store by name + this hash; the pool uses the
 * same function to know whether a container already holds the version an env asks for.
 */
export function templateHash(setup: readonly string[], files: Readonly<Record<string, string>>, image?: string): string {
  const sorted = Object.keys(files)
    .sort()
    .map((k) => [k, files[k]]);
  // A template on an image: the image's reference is part of what builds it (without one, the hash is what it always was).
  return createHash("sha256").update(JSON.stringify(image === undefined ? { setup, files: sorted } : { setup, files: sorted, image })).digest("hex");
}
