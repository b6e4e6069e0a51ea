import { randomBytes } from "node:crypto";
import { chmodSync, mkdirSync, renameSync } from "node:fs";
import { lstat, mkdir, readdir, writeFile, chown } from "node:fs/promises";
import { dirname, join, normalize, isAbsolute } from "node:path";
import type { Logger } from "pino";
import type { TreeRemoval } from "../workspace/tree-removal.js";
import type { TemplateBuildRequest, TemplateBuildResponse, TemplateInfo } from "../../protocol/sandbox.js";
import { templateHash } from "../../protocol/template-hash.js";
import { workspacePathProblem } from "../../protocol/sandbox.js";
import { HttpError } from "../../http/errors.js";
import type { StoredImage } from "../images/image-store.js";

/**
 * The template store of one sandbox server: prepared workspace trees (a repository checked
 * out, its dependencies installed) that slots get a copy-on-write view of at reset.
 *
 * - A template is identified by its name and the hash of what builds it (setup commands +
 *   files): asking again for the same name and hash returns the stored one; a new hash
 *   under a known name builds a new version (the old one stays until no slot uses it, then
 *   it is dropped).
 * - Concurrent requests for one name + hash wait for a single build.
 * - A build runs in `<store>/.building/<id>/tree` and is renamed into the store only when
 *   every command succeeded: a failed, timed-out or interrupted build leaves nothing behind.
 * - Stored trees live under a root-only directory (0700): no slot uid can reach them; slots
 *   see them only through their read-only lower layer (`workspace-overlay.ts`).
 * - The total size is kept under a budget by evicting the least recently used templates
 *   that no slot uses.
 */

/** Runs a template's setup inside a sandbox whose /workspace is `treeDir`. */
export type TemplateBuilder = (treeDir: string, setup: string[], timeoutS: number) => Promise<{ success: boolean; output: string; error: string }>;

/** A template on an image (image-template-build.ts): fetches the image (referenced for the template's life) and builds `<work>/tree`, the template's layer. */
export interface ImageTemplateBuilder {
  take(reference: string): Promise<StoredImage>;
  give(image: StoredImage): void;
  build(image: StoredImage, work: string, req: { setup: string[]; files: Record<string, string> }, timeoutS: number): Promise<{ success: boolean; output: string; error: string }>;
}

export interface TemplateStoreOptions {
  /** Root of the store (server-side state dir; created 0711, the store itself 0700). */
  dir: string;
  budgetBytes: number;
  /** uid/gid the build runs as and its files belong to (undefined: the server's own). */
  buildOwner: { uid: number; gid: number } | undefined;
  build: TemplateBuilder;
  /** Templates on an image (undefined: such a build is refused, images are unavailable here). */
  imageBuild?: ImageTemplateBuilder | undefined;
  defaultTimeoutS: number;
  maxTimeoutS: number;
  logger: Logger;
  /** Deletes trees in child processes (a build's setup commands may leave any tree): see tree-removal.ts. */
  removal: TreeRemoval;
}

/** One stored template version. */
export interface Template {
  readonly name: string;
  readonly hash: string;
  /** Host path of the tree (the lower layer of every slot's view). */
  readonly treeDir: string;
  readonly owner: { uid: number; gid: number } | undefined;
  sizeBytes: number;
  files: number;
  buildMs: number;
  lastUsed: number;
  /** Slots whose workspace is a view of it now. */
  refs: number;
  /** Replaced by a newer version of the same name, or evicted: dropped once refs is 0. */
  retired: boolean;
  /** A template on an image: the image (referenced while the template is stored); `treeDir` is its layer on top. */
  image?: StoredImage | undefined;
  /** Made of a slot's files (`capture`): kept until deleted, never evicted. */
  captured?: boolean;
  /** The slot whose uids the files of an image template's layer have (a capture's source; else the build slot). */
  builtBy?: number;
}

export class TemplateStore {
  private readonly storeDir: string;
  private readonly buildingDir: string;
  /** name → current version. */
  private readonly current = new Map<string, Template>();
  /** Retired versions still used by some slot. */
  private readonly retired = new Set<Template>();
  /** `name@hash` → the build in progress. */
  private readonly inFlight = new Map<string, Promise<TemplateBuildResponse>>();
  /** Builds run by this store (tests and benchmarks count them). */
  buildsRun = 0;

  constructor(private readonly options: TemplateStoreOptions) {
    mkdirSync(options.dir, { recursive: true, mode: 0o711 });
    chmodSync(options.dir, 0o711);
    this.storeDir = join(options.dir, "store");
    this.buildingDir = join(options.dir, "building");
    // Templates live as long as the server: whatever an earlier run left is stale.
    options.removal.discard(this.storeDir);
    options.removal.discard(this.buildingDir);
    mkdirSync(this.storeDir, { mode: 0o700 });
    chmodSync(this.storeDir, 0o700);
    // Builds run as the build uid, which must traverse this directory to reach its tree.
    mkdirSync(this.buildingDir, { mode: 0o711 });
    chmodSync(this.buildingDir, 0o711);
  }

  get budgetBytes(): number {
    return this.options.budgetBytes;
  }

  list(): TemplateInfo[] {
    return [...this.current.values()].sort((a, b) => a.name.localeCompare(b.name)).map(info);
  }

  /** The current version of `name`, or a 404 naming what to do. */
  get(name: string): Template {
    const t = this.current.get(name);
    if (!t) throw new HttpError(404, `unknown template '${name}': build it first with POST /templates (this server has: ${[...this.current.keys()].join(", ") || "none"})`, "template");
    return t;
  }

  /** Marks `t` used by one more slot (not evictable until released). */
  acquire(t: Template): void {
    t.refs++;
    t.lastUsed = Date.now();
  }

  release(t: Template): void {
    t.refs = Math.max(0, t.refs - 1);
    t.lastUsed = Date.now();
    if (t.retired && t.refs === 0) this.drop(t);
  }

  /** Builds the template unless the same name + hash is stored or being built. */
  build(req: TemplateBuildRequest): Promise<TemplateBuildResponse> {
    const files = req.files ?? {};
    for (const p of Object.keys(files)) checkRelative(p);
    const hash = templateHash(req.setup, files, req.image);
    const existing = this.current.get(req.name);
    if (existing && existing.hash === hash) {
      existing.lastUsed = Date.now();
      return Promise.resolve({ success: true, built: false, output: "", error: "", template: info(existing) });
    }
    const key = `${req.name}@${hash}`;
    const running = this.inFlight.get(key);
    if (running) return running.then((r) => ({ ...r, built: false }));
    const timeoutS = Math.min(req.timeout ?? this.options.defaultTimeoutS, this.options.maxTimeoutS);
    const p = this.runBuild(req.name, hash, req.setup, files, timeoutS, req.image).finally(() => this.inFlight.delete(key));
    this.inFlight.set(key, p);
    return p;
  }

  private async runBuild(name: string, hash: string, setup: string[], files: Record<string, string>, timeoutS: number, imageRef?: string): Promise<TemplateBuildResponse> {
    const started = performance.now();
    const work = join(this.buildingDir, `${name}-${hash.slice(0, 12)}-${randomBytes(4).toString("hex")}`);
    const tree = join(work, "tree");
    const owner = this.options.buildOwner;
    let image: StoredImage | undefined;
    try {
      await mkdir(work, { mode: 0o711 });
      let res: { success: boolean; output: string; error: string };
      if (imageRef !== undefined) {
        const ib = this.options.imageBuild;
        if (!ib) throw new HttpError(503, `template '${name}' names an image, but this server cannot give slots image roots`, "image");
        // A failure to get the image is the answer (image_unavailable), before anything is built.
        image = await ib.take(imageRef);
        this.buildsRun++;
        res = await ib.build(image, work, { setup, files }, timeoutS);
      } else {
        await mkdir(tree, { mode: 0o700 });
        if (owner) await chown(tree, owner.uid, owner.gid);
        for (const [rel, content] of Object.entries(files)) await writeOwned(tree, rel, content, owner);
        this.buildsRun++;
        res = await this.options.build(tree, setup, timeoutS);
      }
      if (!res.success) {
        return { success: false, built: true, output: res.output, error: `template '${name}' build failed: ${res.error}` };
      }
      const { bytes, count } = await treeSize(tree);
      if (bytes > this.options.budgetBytes) {
        return {
          success: false,
          built: true,
          output: res.output,
          error: `template '${name}' is ${mb(bytes)} MB, more than the whole template budget (${mb(this.options.budgetBytes)} MB): raise --template-budget-mb`,
        };
      }
      const template: Template = {
        name,
        hash,
        treeDir: join(this.storeDir, `${name}-${hash.slice(0, 16)}`),
        owner,
        sizeBytes: bytes,
        files: count,
        buildMs: Math.round(performance.now() - started),
        lastUsed: Date.now(),
        refs: 0,
        retired: false,
        image,
      };
      image = undefined;
      this.options.removal.discard(template.treeDir);
      renameSync(tree, template.treeDir);
      const previous = this.current.get(name);
      this.current.set(name, template);
      if (previous) this.retire(previous);
      this.evict(template);
      this.options.logger.info({ template: name, hash: hash.slice(0, 12), bytes, files: count, ms: template.buildMs }, "template built");
      return { success: true, built: true, output: res.output, error: "", template: info(template) };
    } catch (err) {
      if (err instanceof HttpError) throw err;
      return { success: false, built: true, output: "", error: `template '${name}' build failed: ${err instanceof Error ? err.message : String(err)}` };
    } finally {
      // Nothing half-built stays: the tree was renamed away on success, else it goes here (and the image's reference).
      if (image) this.options.imageBuild?.give(image);
      this.options.removal.discard(work);
    }
  }

  /**
   * A template made of a slot's files (protocol/template-capture.ts): `fill` copies them into
   * an empty tree owned by `owner`; with `on`, a template on that image (its reference is the
   * template's from now on) whose layer's files have `on.builtBy`'s uids. Replaces a stored
   * template of that name; refused (507) when it does not fit the budget beside what cannot
   * be evicted. Nothing half-made stays.
   */
  async capture(name: string, owner: { uid: number; gid: number } | undefined, fill: (tree: string) => Promise<void>, on?: { image: StoredImage; builtBy: number }): Promise<TemplateInfo> {
    const started = performance.now();
    const hash = randomBytes(32).toString("hex");
    const work = join(this.buildingDir, `${name}-capture-${randomBytes(4).toString("hex")}`);
    const tree = join(work, "tree");
    let image = on?.image;
    try {
      const previous = this.current.get(name);
      if (previous && !previous.captured) throw new HttpError(409, `template '${name}' is built from setup commands on this server: a capture cannot take its name`, "name");
      await mkdir(work, { mode: 0o711 });
      await mkdir(tree, { mode: 0o755 });
      if (owner) await chown(tree, owner.uid, owner.gid);
      await fill(tree);
      const { bytes, count } = await treeSize(tree);
      const template: Template = { name, hash, treeDir: join(this.storeDir, `${name}-${hash.slice(0, 16)}`), owner, sizeBytes: bytes, files: count, buildMs: Math.round(performance.now() - started), lastUsed: Date.now(), refs: 0, retired: false, image, captured: true, ...(on ? { builtBy: on.builtBy } : {}) };
      const kept = [...this.current.values(), ...this.retired].filter((t) => t !== previous && (t.captured || t.refs > 0)).reduce((sum, t) => sum + t.sizeBytes, 0);
      if (kept + bytes > this.options.budgetBytes) {
        throw new HttpError(507, `capturing template '${name}' needs ${mb(bytes)} MB; the template budget (${mb(this.options.budgetBytes)} MB, --template-budget-mb) holds ${mb(kept)} MB that cannot be evicted (captures, templates in use): delete captures or raise the budget`, "name");
      }
      image = undefined;
      this.options.removal.discard(template.treeDir);
      renameSync(tree, template.treeDir);
      this.current.set(name, template);
      if (previous) this.retire(previous);
      this.evict(template);
      this.options.logger.info({ template: name, bytes, files: count, ms: template.buildMs, image: template.image?.reference }, "template captured");
      return info(template);
    } finally {
      if (image) this.options.imageBuild?.give(image);
      this.options.removal.discard(work);
    }
  }

  /** Deletes a captured template (dropped once no slot uses it); false when there is none of that name. */
  delete(name: string): boolean {
    const t = this.current.get(name);
    if (!t) return false;
    if (!t.captured) throw new HttpError(409, `template '${name}' is built from setup commands (POST /templates), not captured: only captures are deleted`, "name");
    this.current.delete(name);
    this.retire(t);
    this.options.logger.info({ template: name }, "captured template deleted");
    return true;
  }

  /** Drops least recently used templates no slot uses until the store fits its budget (captures stay). */
  private evict(keep: Template): void {
    let total = [...this.current.values(), ...this.retired].reduce((s, t) => s + t.sizeBytes, 0);
    const candidates = [...this.current.values()].filter((t) => t !== keep && !t.captured).sort((a, b) => a.lastUsed - b.lastUsed);
    for (const t of candidates) {
      if (total <= this.options.budgetBytes) break;
      if (t.refs > 0) continue;
      this.current.delete(t.name);
      this.drop(t);
      total -= t.sizeBytes;
      this.options.logger.info({ template: t.name, bytes: t.sizeBytes }, "template evicted (budget)");
    }
  }

  private retire(t: Template): void {
    t.retired = true;
    if (t.refs === 0) this.drop(t);
    else this.retired.add(t);
  }

  private drop(t: Template): void {
    t.retired = true;
    this.retired.delete(t);
    if (t.image) this.options.imageBuild?.give(t.image);
    t.image = undefined;
    // Renamed away at once, deleted by a child process.
    this.options.removal.discard(t.treeDir);
  }

  /** Removes every stored template (server shutdown; slots are unmounted by then). */
  close(): void {
    this.options.removal.discard(this.storeDir);
    this.options.removal.discard(this.buildingDir);
  }
}

function info(t: Template): TemplateInfo {
  return { name: t.name, hash: t.hash, size_bytes: t.sizeBytes, files: t.files, build_ms: t.buildMs, in_use: t.refs, last_used: new Date(t.lastUsed).toISOString(), ...(t.image ? { image: { reference: t.image.reference, digest: t.image.digest } } : {}), ...(t.captured ? { captured: true } : {}) };
}

function checkRelative(p: string): void {
  const n = normalize(p);
  if (p === "" || isAbsolute(p) || n === ".." || n.startsWith("../") || n === ".") {
    throw new HttpError(400, `invalid template file path '${p}': use a path relative to /workspace, without '..'`, "files");
  }
  // NUL bytes, names or paths over the filesystem's limits: refused before anything is written.
  const problem = workspacePathProblem(p);
  if (problem) throw new HttpError(400, `invalid template file path ${JSON.stringify(p.slice(0, 200))}: the path ${problem}`, "files");
}

async function writeOwned(tree: string, rel: string, content: string, owner: { uid: number; gid: number } | undefined): Promise<void> {
  const parts = normalize(rel).split("/");
  let dir = tree;
  // Create parents one at a time so each belongs to the build uid.
  for (const part of parts.slice(0, -1)) {
    dir = join(dir, part);
    try {
      await mkdir(dir, { mode: 0o755 });
      if (owner) await chown(dir, owner.uid, owner.gid);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== "EEXIST") throw err;
    }
  }
  const file = join(tree, ...parts);
  await mkdir(dirname(file), { recursive: true });
  await writeFile(file, content, { mode: 0o644 });
  if (owner) await chown(file, owner.uid, owner.gid);
}

/** Bytes (allocated blocks, as du counts) and entries of a tree; symlinks are not followed. */
export async function treeSize(root: string): Promise<{ bytes: number; count: number }> {
  let bytes = 0;
  let count = 0;
  const stack = [root];
  while (stack.length > 0) {
    const dir = stack.pop()!;
    const names = await readdir(dir);
    await Promise.all(
      names.map(async (n) => {
        const p = join(dir, n);
        const st = await lstat(p);
        count++;
        bytes += st.blocks !== undefined ? st.blocks * 512 : st.size;
        if (st.isDirectory()) stack.push(p);
      }),
    );
  }
  return { bytes, count };
}

function mb(bytes: number): string {
  return (bytes / 1024 / 1024).toFixed(1);
}
