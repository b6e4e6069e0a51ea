/**
 * The sandbox job's part for task images (docs/images.md, docs/nomad.md): where each
 * server's image store lives (a sticky ephemeral disk, or a host volume), its budget, and the
 * registry credentials the servers read from their environment.
 */
import { SandboxJobOptionError } from "./job-errors.js";

/** The task images' ephemeral disk of each allocation by default, MB (see `JobImageOptions.imageDiskMb`). */
export const IMAGE_DISK_MB = 5120;
/** Where a host volume of task images is mounted in the task (`JobImageOptions.imageHostVolume`). */
export const IMAGE_VOLUME_PATH = "/var/lib/slotpool/images";
/** The group's name for that volume. */
export const IMAGE_VOLUME = "slotpool-images";

export interface JobImageOptions {
  /**
   * The task images' store, in the allocation's ephemeral disk by default: the server keeps it
   * under its data dir ($NOMAD_ALLOC_DIR/data, a directory of the node's own filesystem even
   * under docker, whose root, overlayfs, cannot hold one), and the job asks for a sticky
   * ephemeral disk of this many MB (default IMAGE_DISK_MB; Nomad places the allocation where
   * it fits and keeps it on that node across replacements). The server's budget
   * (`--image-budget-mb`) is 80 % of it unless `imageBudgetMb` says.
   */
  imageDiskMb?: number;
  /**
   * Instead of the ephemeral disk: a Nomad host volume (the client's `host_volume` block)
   * mounted at IMAGE_VOLUME_PATH, each allocation index keeping its store in a directory of
   * its own there (kept across allocations; docker and exec drivers).
   */
  imageHostVolume?: string;
  /** The store's budget, MB (`--image-budget-mb`). Default: 80 % of `imageDiskMb`; with a host volume, the server's own (20480). */
  imageBudgetMb?: number;
  /**
   * A Docker-style registry auth document (`{"auths": {...}}`) the servers read from their
   * environment (`SLOTPOOL_REGISTRY_AUTH`; never on a command line, never logged). It is part
   * of the job (readable by whoever may read the job, as the token is): in production render
   * it from a Nomad Variable or Vault instead (docs/nomad.md).
   */
  registryAuth?: string;
}

export interface JobImageSettings {
  /** The sticky ephemeral disk's size, MB (undefined: a host volume holds the images, Nomad's default disk). */
  imageDiskMb: number | undefined;
  imageHostVolume: string | undefined;
  /** `--image-budget-mb`, or undefined for the server's default. */
  imageBudgetMb: number | undefined;
  registryAuth: string | undefined;
}

/** The image options resolved (defaults, checks); errors name the option and the fix. */
export function resolveJobImages(options: JobImageOptions, driver: string): JobImageSettings {
  const imageHostVolume = options.imageHostVolume || undefined;
  if (imageHostVolume !== undefined && driver === "raw_exec") throw new SandboxJobOptionError("imageHostVolume needs the docker or exec driver (raw_exec mounts no volume): keep the images on the ephemeral disk (imageDiskMb)");
  if (imageHostVolume !== undefined && options.imageDiskMb !== undefined) throw new SandboxJobOptionError("imageDiskMb and imageHostVolume both name where the images go: give one");
  const imageDiskMb = imageHostVolume !== undefined ? undefined : whole("imageDiskMb", options.imageDiskMb ?? IMAGE_DISK_MB, 64);
  const imageBudgetMb = options.imageBudgetMb !== undefined ? whole("imageBudgetMb", options.imageBudgetMb, 1) : imageDiskMb !== undefined ? Math.floor(imageDiskMb * 0.8) : undefined;
  if (imageDiskMb !== undefined && imageBudgetMb !== undefined && imageBudgetMb > imageDiskMb) {
    throw new SandboxJobOptionError(`imageBudgetMb ${imageBudgetMb} is more than the image disk (imageDiskMb ${imageDiskMb}): the store would fill the disk; raise imageDiskMb or lower imageBudgetMb`);
  }
  if (options.registryAuth !== undefined && !isAuthDocument(options.registryAuth)) {
    // The document itself is never in the message: it holds credentials.
    throw new SandboxJobOptionError('registryAuth must be a Docker-style auth document, a JSON object with "auths" (docs/images.md, "Credentials")');
  }
  return { imageDiskMb, imageHostVolume, imageBudgetMb, registryAuth: options.registryAuth };
}

/** The server's image flags (unless its own serverArgs set them): the store in the host volume, one per allocation index; the budget. */
export function imageStoreArgs(s: JobImageSettings & { serverArgs: readonly string[] }): string[] {
  return [
    ...(s.imageHostVolume !== undefined && !s.serverArgs.includes("--image-store") ? ["--image-store", `${IMAGE_VOLUME_PATH}/\${NOMAD_ALLOC_INDEX}`] : []),
    ...(s.imageBudgetMb !== undefined && !s.serverArgs.includes("--image-budget-mb") ? ["--image-budget-mb", String(s.imageBudgetMb)] : []),
  ];
}

/** The task group's disk for the images: a sticky ephemeral disk, or the host volume. */
export function imageStoreGroupJson(s: JobImageSettings): Record<string, unknown> {
  if (s.imageHostVolume !== undefined) return { Volumes: { [IMAGE_VOLUME]: { Name: IMAGE_VOLUME, Type: "host", Source: s.imageHostVolume, ReadOnly: false } } };
  return s.imageDiskMb !== undefined ? { EphemeralDisk: { SizeMB: s.imageDiskMb, Sticky: true } } : {};
}

/** The task's mount of the host volume, if one holds the images. */
export function imageStoreTaskJson(s: JobImageSettings): Record<string, unknown> {
  return s.imageHostVolume !== undefined ? { VolumeMounts: [{ Volume: IMAGE_VOLUME, Destination: IMAGE_VOLUME_PATH, ReadOnly: false }] } : {};
}

/** The task's environment: the token, and the registry credentials when given (never argv: `ps` would show them). */
export function taskEnv(s: JobImageSettings & { token: string }): Record<string, string> {
  return { SANDBOX_TOKEN: s.token, ...(s.registryAuth !== undefined ? { SLOTPOOL_REGISTRY_AUTH: s.registryAuth } : {}) };
}

function isAuthDocument(text: string): boolean {
  try {
    const doc = JSON.parse(text) as unknown;
    return typeof doc === "object" && doc !== null && !Array.isArray(doc) && typeof (doc as { auths?: unknown }).auths === "object";
  } catch {
    return false;
  }
}

function whole(name: string, value: number, min: number): number {
  if (!Number.isInteger(value) || value < min) throw new SandboxJobOptionError(`${name} must be a whole number >= ${min}, got ${value}`);
  return value;
}
