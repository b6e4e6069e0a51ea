import { z } from "zod";

/**
 * Task images on the wire: an OCI image a slot's root filesystem is made of, named the way
 * skopeo names it, and what the sandbox server answers about the images it holds.
 *
 * A reference is one of (skopeo's transports, the registry one the default):
 * - `host[:port]/repo[:tag|@sha256:…]` (or with an explicit `docker://`): a registry; a name
 *   without a host (`python:3.12`) is Docker Hub's, as docker and skopeo read it;
 * - `docker-daemon:name:tag` / `docker-daemon:name@sha256:…`: the node's Docker engine;
 * - `oci:/abs/dir[:tag]`: an OCI image layout on the server's disk;
 * - `docker-archive:/abs/file.tar[:name:tag]`: a `docker save` archive on the server's disk.
 * Anything else (another transport, a relative path, upper-case repository names, a bad tag
 * or digest) cannot name an image: `imageReferenceProblem` says why, and the server answers
 * 400 naming the field before anything runs.
 */

/**
 * Where the sandbox server binds its static tools (busybox among them, at `bin/busybox`) in
 * every image root, read-only: a client may run them in a sandbox whose root is an image,
 * whatever the image holds (src/sandbox/images/image-tools.ts says what is there).
 */
export const IMAGE_TOOLS_MOUNT = "/run/slotpool";

export const IMAGE_TRANSPORTS = ["docker", "docker-daemon", "oci", "docker-archive"] as const;
export type ImageTransport = (typeof IMAGE_TRANSPORTS)[number];

/** A reference taken apart: enough to run skopeo on it and to say what it names. */
export interface ParsedImageReference {
  transport: ImageTransport;
  /** The reference as skopeo takes it (`docker://…`, `docker-daemon:…`, `oci:…`, `docker-archive:…`). */
  skopeo: string;
  /** Registry references: the registry's host[:port] (Docker Hub's `docker.io` when none is named). */
  registry?: string;
  /** Registry and daemon references: the repository path (`library/python` for `python`). */
  repository?: string;
  tag?: string;
  digest?: string;
  /** oci / docker-archive: the absolute path on the server. */
  path?: string;
}

/** Longest reference taken (Docker's own limit on a name is 255; paths and digests add to it). */
export const MAX_IMAGE_REFERENCE_LENGTH = 4096;

// Docker's reference grammar (github.com/distribution/reference), the parts skopeo checks.
const COMPONENT = "[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*";
const PATH_RE = new RegExp(`^${COMPONENT}(?:/${COMPONENT})*$`);
const DOMAIN_COMPONENT = "(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])";
const DOMAIN_RE = new RegExp(`^(?:${DOMAIN_COMPONENT}(?:\\.${DOMAIN_COMPONENT})*|\\[[0-9a-fA-F:.]+\\])(?::[0-9]{1,5})?$`);
const TAG_RE = /^[\w][\w.-]{0,127}$/;
const DIGEST_RE = /^[a-z0-9]+(?:[.+_-][a-z0-9]+)*:[a-zA-Z0-9=_-]{32,}$/;
const SHA256_RE = /^sha256:[a-f0-9]{64}$/;
/** skopeo's other transports: real, but not sources a sandbox server takes. */
const OTHER_TRANSPORTS = ["dir", "containers-storage", "ostree", "sif", "tarball", "oci-archive", "atomic"];

/** Why `ref` cannot name an image (undefined: it can), in words that name the problem. */
export function imageReferenceProblem(ref: string): string | undefined {
  const parsed = parseImageReferenceOrProblem(ref);
  return typeof parsed === "string" ? parsed : undefined;
}

/** Takes a reference apart; throws an Error naming the problem when it cannot name an image. */
export function parseImageReference(ref: string): ParsedImageReference {
  const parsed = parseImageReferenceOrProblem(ref);
  if (typeof parsed === "string") throw new Error(`image reference ${JSON.stringify(ref.slice(0, 200))} ${parsed}`);
  return parsed;
}

function parseImageReferenceOrProblem(ref: string): ParsedImageReference | string {
  if (ref.length === 0) return "is empty";
  if (ref.length > MAX_IMAGE_REFERENCE_LENGTH) return `is longer than ${MAX_IMAGE_REFERENCE_LENGTH} characters`;
  // eslint-disable-next-line no-control-regex
  if (/[\u0000-\u001f\u007f]/.test(ref)) return "contains a control character";
  if (ref.startsWith("docker://")) return registryReference(ref.slice("docker://".length));
  const colon = ref.indexOf(":");
  const slash = ref.indexOf("/");
  const prefix = colon > 0 && (slash < 0 || colon < slash) ? ref.slice(0, colon) : undefined;
  if (prefix === "docker-daemon") return daemonReference(ref.slice(colon + 1));
  if (prefix === "oci") return pathReference("oci", ref.slice(colon + 1));
  if (prefix === "docker-archive") return pathReference("docker-archive", ref.slice(colon + 1));
  // `dir:1.0` could be an image `dir` with tag 1.0; `dir:/path` is the transport.
  if (prefix !== undefined && OTHER_TRANSPORTS.includes(prefix) && !TAG_RE.test(ref.slice(colon + 1).split("@")[0]!)) {
    return `uses the transport '${prefix}:', which is not supported: use a registry reference (host[:port]/repo[:tag|@digest]), docker-daemon:, oci:DIR[:tag] or docker-archive:FILE`;
  }
  return registryReference(ref);
}

function registryReference(ref: string): ParsedImageReference | string {
  let rest = ref;
  let digest: string | undefined;
  const at = rest.indexOf("@");
  if (at >= 0) {
    digest = rest.slice(at + 1);
    rest = rest.slice(0, at);
    if (!DIGEST_RE.test(digest)) return `has an invalid digest '${digest.slice(0, 100)}' (expected sha256: and 64 hex digits)`;
    if (digest.startsWith("sha256:") && !SHA256_RE.test(digest)) return `has an invalid digest '${digest.slice(0, 100)}' (expected sha256: and 64 lower-case hex digits)`;
  }
  let tag: string | undefined;
  const lastSlash = rest.lastIndexOf("/");
  const tagColon = rest.indexOf(":", lastSlash + 1);
  if (tagColon >= 0) {
    tag = rest.slice(tagColon + 1);
    rest = rest.slice(0, tagColon);
    if (!TAG_RE.test(tag)) return `has an invalid tag '${tag.slice(0, 140)}' (letters, digits, '_', '.', '-', at most 128, not starting with '.' or '-')`;
  }
  if (rest === "") return "names no repository";
  const parts = rest.split("/");
  let registry = "docker.io";
  if (parts.length > 1 && (parts[0]!.includes(".") || parts[0]!.includes(":") || parts[0] === "localhost" || parts[0]!.startsWith("["))) {
    registry = parts.shift()!;
    if (!DOMAIN_RE.test(registry)) return `has an invalid registry host '${registry.slice(0, 200)}'`;
    const port = /:(\d+)$/.exec(registry)?.[1];
    if (port !== undefined && (Number(port) < 1 || Number(port) > 65535)) return `has an invalid registry port ${port}`;
  }
  let repository = parts.join("/");
  if (!PATH_RE.test(repository)) {
    return `has an invalid repository name '${repository.slice(0, 200)}' (lower-case letters, digits and the separators '.', '_', '__', '-', '/')`;
  }
  if (repository.length > 255) return "has a repository name longer than 255 characters";
  if (registry === "docker.io" && !repository.includes("/")) repository = `library/${repository}`;
  const skopeo = `docker://${registry}/${repository}${tag !== undefined ? `:${tag}` : ""}${digest !== undefined ? `@${digest}` : ""}`;
  return { transport: "docker", skopeo, registry, repository, ...(tag !== undefined ? { tag } : {}), ...(digest !== undefined ? { digest } : {}) };
}

function daemonReference(rest: string): ParsedImageReference | string {
  if (rest === "") return "names no image after docker-daemon:";
  // docker-daemon:sha256:<hex> names an image id; else name:tag or name@digest.
  if (SHA256_RE.test(rest)) return { transport: "docker-daemon", skopeo: `docker-daemon:${rest}`, digest: rest };
  const r = registryReference(rest);
  if (typeof r === "string") return r;
  if (r.tag === undefined && r.digest === undefined) return "names no tag or digest after docker-daemon: (docker-daemon:name:tag)";
  const name = rest.split(/[@]/)[0]!.replace(/:[^:/]*$/, "");
  return { transport: "docker-daemon", skopeo: `docker-daemon:${rest}`, repository: name, ...(r.tag !== undefined ? { tag: r.tag } : {}), ...(r.digest !== undefined ? { digest: r.digest } : {}) };
}

function pathReference(transport: "oci" | "docker-archive", rest: string): ParsedImageReference | string {
  const [path, ...more] = rest.split(":");
  const suffix = more.join(":");
  if (!path) return `names no path after ${transport}:`;
  if (!path.startsWith("/")) return `names a relative path '${path.slice(0, 200)}' after ${transport}: (the server's paths must be absolute)`;
  if (path.split("/").includes("..")) return `names a path with '..' after ${transport}:`;
  if (transport === "oci" && suffix !== "" && !TAG_RE.test(suffix)) return `has an invalid tag '${suffix.slice(0, 140)}' after oci:${path}:`;
  if (transport === "docker-archive" && suffix !== "" && typeof registryReference(suffix) === "string") return `names an invalid image '${suffix.slice(0, 200)}' inside the archive`;
  return { transport, skopeo: `${transport}:${rest}`, path, ...(transport === "oci" && suffix ? { tag: suffix } : {}) };
}

/** Why `host` cannot name a registry (`--insecure-registry HOST[:PORT]`), or undefined. */
export function registryHostProblem(host: string): string | undefined {
  if (!DOMAIN_RE.test(host)) return `'${host.slice(0, 200)}' is not a registry HOST[:PORT] (e.g. 127.0.0.1:5000 or registry.local:5000)`;
  const port = /:(\d+)$/.exec(host)?.[1];
  if (port !== undefined && (Number(port) < 1 || Number(port) > 65535)) return `'${host}' has an invalid port ${port}`;
  return undefined;
}

export const ImageReferenceSchema = z.string().superRefine((ref, ctx) => {
  const problem = imageReferenceProblem(ref);
  if (problem) ctx.addIssue({ code: "custom", message: `image reference ${JSON.stringify(ref.slice(0, 200))} ${problem}` });
});

/**
 * Why an image could not be had: the infrastructure's failure, never the trajectory's. Every
 * such answer is `{"error", "field": "image", "code": "image_unavailable", "reason"}` with the
 * HTTP status below, so a client classifies it by `code` (an infra failure: retry elsewhere
 * or drop, never score), and `reason` says which:
 * - `not_found` (404): no such image or tag at the source;
 * - `auth_failed` (502): the registry refused the credentials (or asked for some);
 * - `insecure_registry` (502): a plain-HTTP registry not named by `--insecure-registry`;
 * - `pull_failed` (502): the source could not be read (unreachable, broken, timed out);
 * - `unpack_failed` (500): a layer could not be unpacked;
 * - `store_full` (507): the image does not fit the image store's budget with what slots use;
 * - `unsupported` (503): this server cannot give slots image roots (why, in `error`).
 */
export const IMAGE_UNAVAILABLE = "image_unavailable";
export const IMAGE_FAILURE_REASONS = ["not_found", "auth_failed", "insecure_registry", "pull_failed", "unpack_failed", "store_full", "unsupported"] as const;
export type ImageFailureReason = (typeof IMAGE_FAILURE_REASONS)[number];
export const IMAGE_FAILURE_STATUS: Record<ImageFailureReason, number> = {
  not_found: 404,
  auth_failed: 502,
  insecure_registry: 502,
  pull_failed: 502,
  unpack_failed: 500,
  store_full: 507,
  unsupported: 503,
};

export const ImageUnavailableBodySchema = z.object({
  error: z.string(),
  field: z.string().optional(),
  code: z.literal(IMAGE_UNAVAILABLE),
  reason: z.enum(IMAGE_FAILURE_REASONS),
  image: z.string().optional(),
});
export type ImageUnavailableBody = z.infer<typeof ImageUnavailableBodySchema>;

/** Whether an error body (a 4xx/5xx answer of a sandbox server) says an image could not be had. */
export function isImageUnavailable(body: unknown): body is ImageUnavailableBody {
  return ImageUnavailableBodySchema.safeParse(body).success;
}

/** What fetching an image cost, when a request had to fetch it (absent when it was cached). */
export const ImageFetchSchema = z.object({
  /** skopeo's copy of the manifest, config and the layers not already in the store. */
  pull_ms: z.number().nonnegative(),
  /** Unpacking the layers not already unpacked. */
  unpack_ms: z.number().nonnegative(),
  /** Bytes of blobs downloaded (compressed). */
  pulled_bytes: z.number().int().nonnegative(),
  layers: z.number().int().nonnegative(),
  /** Layers already in the store (shared with another image): neither pulled nor unpacked again. */
  layers_reused: z.number().int().nonnegative(),
});
export type ImageFetch = z.infer<typeof ImageFetchSchema>;

/** The parts of an image's config that shape a slot (OCI config `Env`, `WorkingDir`, `User`). */
export const ImageRuntimeSchema = z.object({
  env: z.array(z.string()),
  /** The trajectory's working directory: `cwd` of commands, base of relative file paths. */
  working_dir: z.string(),
  /** As the image names it ("" for root). */
  user: z.string(),
  /** Its uid/gid inside the slot (0/0 on a server that is not root: see docs/images.md). */
  uid: z.number().int().nonnegative(),
  gid: z.number().int().nonnegative(),
  home: z.string(),
});
export type ImageRuntime = z.infer<typeof ImageRuntimeSchema>;

export const ImageInfoSchema = z.object({
  /** The reference as first asked for. */
  reference: z.string(),
  /** The manifest's digest (sha256:…). */
  digest: z.string(),
  /** Compressed blobs plus unpacked layers on the store's disk, layers shared with other images counted once per image. */
  size_bytes: z.number().int().nonnegative(),
  layers: z.number().int().nonnegative(),
  /** Slots whose root is this image now (it is not evicted while > 0). */
  in_use: z.number().int().nonnegative(),
  last_used: z.string(),
  runtime: ImageRuntimeSchema,
});
export type ImageInfo = z.infer<typeof ImageInfoSchema>;

/** `POST /images`: fetch (and unpack) an image ahead of the resets that use it. */
export const ImagePullRequestSchema = z.object({
  image: ImageReferenceSchema,
});
export type ImagePullRequest = z.infer<typeof ImagePullRequestSchema>;
export const ImagePullResponseSchema = z.object({
  image: ImageInfoSchema,
  /** Present when this request fetched it (or waited for another request that did). */
  fetched: ImageFetchSchema.optional(),
});
export type ImagePullResponse = z.infer<typeof ImagePullResponseSchema>;

/** `GET /images`: the image store of this server. */
export const ImageListResponseSchema = z.object({
  images: z.array(ImageInfoSchema),
  budget_bytes: z.number().int().nonnegative(),
  used_bytes: z.number().int().nonnegative(),
  /** Whether slots can get image roots here; why not when they cannot. */
  available: z.boolean(),
  unavailable_reason: z.string().optional(),
});
export type ImageListResponse = z.infer<typeof ImageListResponseSchema>;

/** What a reset into an image answers about it (`ResetResponse.image`). */
export const ResetImageSchema = z.object({
  reference: z.string(),
  digest: z.string(),
  runtime: ImageRuntimeSchema,
  fetched: ImageFetchSchema.optional(),
});
export type ResetImage = z.infer<typeof ResetImageSchema>;

/** `/health` → `slot_images`: which image each slot's root is (null: the server's own system view). */
export const SlotImageSchema = z.object({ reference: z.string(), digest: z.string() }).nullable();
