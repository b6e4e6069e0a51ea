import { spawn } from "node:child_process";
import { existsSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { parseImageReference, type ImageFailureReason, type ParsedImageReference } from "../../protocol/images.js";

/**
 * Fetching an image with skopeo (the containers ecosystem's copier): `skopeo copy` of the
 * reference into an OCI layout of its own whose blobs go to the store's shared blob dir
 * (`--dest-shared-blob-dir`), so a layer two images share is downloaded once and a blob
 * already there is skipped. skopeo verifies every blob's digest as it copies.
 *
 * Credentials never travel on a command line (other users of the host read those) and are
 * never logged: skopeo reads them itself from REGISTRY_AUTH_FILE, the containers auth file
 * (`$XDG_RUNTIME_DIR/containers/auth.json`) or `~/.docker/config.json`; or, when the server's
 * environment has SLOTPOOL_REGISTRY_AUTH (a Docker-style `{"auths": {...}}` document), from a
 * copy of it in the server's state dir (0600), passed as `--authfile`.
 *
 * Plain-HTTP registries: only those named with `--insecure-registry HOST:PORT` are read with
 * `--src-tls-verify=false` (skopeo then also accepts plain HTTP); any other registry must
 * speak TLS with a certificate the host trusts.
 */

export interface SkopeoOptions {
  skopeo: string;
  /** HOST[:PORT] of registries that may be plain HTTP (or TLS with a certificate the host does not trust). */
  insecureRegistries: readonly string[];
  /** `--authfile` (made from SLOTPOOL_REGISTRY_AUTH), if any. */
  authFile: string | undefined;
  /** Where skopeo's temporary files go (the store's own disk: blobs can be large). */
  tmpDir: string;
  timeoutMs: number;
  /** REGISTRY → HOST[:PORT] it is fetched from instead (`--registry-mirror`). */
  mirrors?: Readonly<Record<string, string>>;
}

/** The reference as fetched: through its registry's mirror, if it has one. */
export function throughMirror(ref: ParsedImageReference, mirrors: Readonly<Record<string, string>> | undefined): ParsedImageReference {
  const mirror = ref.registry !== undefined ? mirrors?.[ref.registry] : undefined;
  if (!mirror || ref.transport !== "docker") return ref;
  return { ...ref, registry: mirror, skopeo: ref.skopeo.replace(`docker://${ref.registry}/`, `docker://${mirror}/`) };
}

/** Why a copy failed, from skopeo's words (its exit code says nothing finer). */
export function classifySkopeoError(stderr: string): ImageFailureReason {
  const s = stderr.toLowerCase();
  if (/no space left on device|disk quota exceeded/.test(s)) return "store_full";
  if (/http response to https client|server gave http response/.test(s)) return "insecure_registry";
  if (/unauthorized|authentication required|requested access to the resource is denied|denied:|invalid username\/password|401 unauthorized|403 forbidden/.test(s)) return "auth_failed";
  if (/manifest unknown|name unknown|not found|no such image|no such file or directory|reference does not exist|does not exist|unknown tag|no image matching|error getting image/.test(s)) return "not_found";
  return "pull_failed";
}

/** Writes SLOTPOOL_REGISTRY_AUTH (if set) to a private file for `--authfile`; returns its path. Throws naming the variable when it is not JSON. */
export function authFileFromEnvironment(stateDir: string, env: NodeJS.ProcessEnv = process.env): string | undefined {
  const text = env["SLOTPOOL_REGISTRY_AUTH"];
  if (!text) return undefined;
  let doc: unknown;
  try {
    doc = JSON.parse(text);
  } catch {
    // The value is a secret: never repeated in the message.
    throw new Error("SLOTPOOL_REGISTRY_AUTH is not JSON: it must be a Docker-style auth document, {\"auths\": {\"HOST:PORT\": {\"auth\": \"<base64 user:password>\"}}}");
  }
  if (typeof doc !== "object" || doc === null || typeof (doc as { auths?: unknown }).auths !== "object") {
    throw new Error("SLOTPOOL_REGISTRY_AUTH has no \"auths\" object: it must be a Docker-style auth document, {\"auths\": {\"HOST:PORT\": {\"auth\": \"<base64 user:password>\"}}}");
  }
  const path = join(stateDir, "registry-auth.json");
  writeFileSync(path, JSON.stringify(doc), { mode: 0o600 });
  return path;
}

/** `skopeo copy` of `ref` into the OCI layout `layoutDir` (tag `image`), blobs into `blobDir`. Rejects with a classified reason and skopeo's last words. */
export function skopeoCopy(asked: ParsedImageReference, layoutDir: string, blobDir: string, o: SkopeoOptions): Promise<void> {
  const ref = throughMirror(asked, o.mirrors);
  const insecure = ref.registry !== undefined && o.insecureRegistries.includes(ref.registry);
  const args = [
    // The host's signature policy when it has one; without one skopeo refuses everything.
    ...(existsSync("/etc/containers/policy.json") ? [] : ["--insecure-policy"]),
    "copy",
    "--quiet",
    "--retry-times", "2",
    "--dest-shared-blob-dir", blobDir,
    ...(insecure ? ["--src-tls-verify=false"] : []),
    ...(o.authFile && ref.transport === "docker" ? ["--src-authfile", o.authFile] : []),
    ref.skopeo,
    `oci:${layoutDir}:image`,
  ];
  const env: NodeJS.ProcessEnv = { PATH: process.env["PATH"] ?? "/usr/bin:/bin", TMPDIR: o.tmpDir };
  // What skopeo reads credentials and its daemon address from (never logged).
  for (const k of ["HOME", "REGISTRY_AUTH_FILE", "XDG_RUNTIME_DIR", "DOCKER_HOST", "DOCKER_CONFIG", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy"]) {
    const v = process.env[k];
    if (v !== undefined) env[k] = v;
  }
  return new Promise((resolve, reject) => {
    const child = spawn(o.skopeo, args, { stdio: ["ignore", "ignore", "pipe"], env });
    let stderr = "";
    child.stderr!.setEncoding("utf8");
    child.stderr!.on("data", (d: string) => {
      stderr = (stderr + d).slice(-4000);
    });
    const timer = setTimeout(() => {
      stderr += `\n(timed out after ${Math.round(o.timeoutMs / 1000)} s)`;
      child.kill("SIGKILL");
    }, o.timeoutMs);
    child.once("error", (err) => {
      clearTimeout(timer);
      reject(new SkopeoError("pull_failed", `could not start skopeo: ${err.message}`));
    });
    child.once("close", (code, signal) => {
      clearTimeout(timer);
      if (code === 0) return resolve();
      const words = stderr.trim().split("\n").filter(Boolean).slice(-3).join(" ").replace(/\s+/g, " ");
      const reason = /timed out after/.test(stderr) ? "pull_failed" : classifySkopeoError(stderr);
      const hint = reason === "insecure_registry" ? ` (a plain-HTTP registry: start the server with --insecure-registry ${ref.registry ?? "HOST:PORT"} to allow it)` : "";
      reject(new SkopeoError(reason, `skopeo copy failed (${signal ?? `exit ${code}`}): ${words || "no message"}${hint}`));
    });
  });
}

export class SkopeoError extends Error {
  override name = "SkopeoError";
  constructor(
    readonly reason: ImageFailureReason,
    message: string,
  ) {
    super(message);
  }
}

/**
 * `skopeo copy` of a local image (`oci:DIR:TAG`) to `destination` (a registry reference, or
 * `oci:DIR:TAG`): how an image build's result reaches the pool's other containers. A registry
 * named by `--insecure-registry` may be plain HTTP; credentials as for a fetch.
 */
export async function skopeoPush(source: string, destination: string, insecureRegistries: readonly string[], authFile?: string): Promise<void> {
  const dest = parseImageReference(destination);
  const insecure = dest.registry !== undefined && insecureRegistries.includes(dest.registry);
  const args = [
    ...(existsSync("/etc/containers/policy.json") ? [] : ["--insecure-policy"]),
    "copy",
    "--quiet",
    "--retry-times", "2",
    ...(insecure ? ["--dest-tls-verify=false"] : []),
    ...(authFile && dest.transport === "docker" ? ["--dest-authfile", authFile] : []),
    source,
    dest.skopeo,
  ];
  await new Promise<void>((resolve, reject) => {
    const child = spawn("skopeo", args, { stdio: ["ignore", "ignore", "pipe"] });
    let stderr = "";
    child.stderr!.setEncoding("utf8");
    child.stderr!.on("data", (d: string) => (stderr = (stderr + d).slice(-4000)));
    child.once("error", (err) => reject(new Error(`could not start skopeo: ${err.message}`)));
    child.once("close", (code) => (code === 0 ? resolve() : reject(new Error(`skopeo copy failed (exit ${code}): ${stderr.trim().split("\n").slice(-3).join(" ")}`))));
  });
}
