import { randomBytes } from "node:crypto";
import { Agent, request, type Dispatcher } from "undici";
import type { AcquireOptions, ContainerInfo, LeasedSlot } from "../pool/types.js";
import type { TemplateCaptureResponse, TemplateDeleteResponse } from "../protocol/template-capture.js";
import { E2bApiError } from "./errors.js";

/**
 * E2B's snapshots (`createSnapshot`, `listSnapshots`, `deleteSnapshot`, `Sandbox.create(snapshotId)`),
 * each a template captured from the sandbox's slot on its container (protocol/template-capture.ts):
 * the sandbox's files as they are (a plain slot's workspace, /home/user; an image slot's every
 * change to its image, as a template on that image), never its memory or processes. A snapshot
 * lives in the template store of the container the sandbox ran on, while that container and this
 * server live: sandboxes made from it get a slot of that container (the pool prefers it; when it
 * has no free slot, create answers 503 rather than a sandbox without the files). Its id is its
 * name when one was given (a new snapshot of a name replaces the old one), else `snap-<hex>`;
 * the id is also the template's name on the container.
 */

/** What snapshots need of the pool: its slots, its containers, and the record of which holds which template (affinity). */
export interface SnapshotPool {
  acquire(options: AcquireOptions): Promise<LeasedSlot>;
  release(slot: LeasedSlot, options?: { reset?: boolean }): Promise<void>;
  containerList?(): Array<ContainerInfo & { state: string }>;
  templates?: { record(containerId: string, name: string, hash: string): void; forget(containerId: string, name?: string): void };
}

export interface Snapshot {
  /** E2B's snapshotID: the name given, or `snap-<hex>`; the template's name on its container. */
  readonly id: string;
  readonly names: string[];
  readonly sandboxId: string;
  readonly containerId: string;
  /** How to reach its container (the one the sandbox ran on). */
  readonly container: ContainerInfo;
  /** The template is on this image (the sandbox's root was one). */
  readonly image?: { reference: string; digest: string } | undefined;
  readonly createdAt: Date;
}

/** E2B snapshot names as slotpool keeps them: they become template names on the container. */
export const SNAPSHOT_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/;

/** A capture copies what the sandbox has written: it may take a while for a big workspace. */
const agent: Dispatcher = new Agent({ keepAliveTimeout: 30_000, connections: 16, headersTimeout: 11 * 60_000, bodyTimeout: 60_000 });

export class SandboxSnapshots {
  private readonly byId = new Map<string, Snapshot>();

  constructor(
    private readonly pool: SnapshotPool,
    /** Names snapshots cannot take (templates this server offers otherwise). */
    private readonly taken: (name: string) => boolean,
  ) {}

  /** A snapshot of the sandbox on `slot` (its files as they are now; it keeps running). */
  async create(sandbox: { id: string; slot: LeasedSlot }, name: string | undefined): Promise<Snapshot> {
    if (name !== undefined && !SNAPSHOT_NAME.test(name)) throw new E2bApiError(400, `name: a snapshot name is 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit; got ${JSON.stringify(name.slice(0, 80))}`, "name");
    if (name !== undefined && this.taken(name)) throw new E2bApiError(409, `name: '${name}' is a template of this server, not a snapshot`, "name");
    const id = name ?? `snap-${randomBytes(8).toString("hex")}`;
    const c = sandbox.slot.container;
    const answer = await call<TemplateCaptureResponse>(c, "/templates/capture", { slot_id: sandbox.slot.slotId, name: id });
    const snapshot: Snapshot = { id, names: [id], sandboxId: sandbox.id, containerId: c.id, container: c, image: answer.template.image, createdAt: new Date() };
    const previous = this.byId.get(id);
    this.byId.set(id, snapshot);
    this.pool.templates?.record(c.id, id, answer.template.hash);
    // A name taken again on another container: the old one goes (it stays only where it is replaced in place).
    if (previous && previous.containerId !== c.id) await this.drop(previous).catch(() => undefined);
    return snapshot;
  }

  /**
   * A slot reset into the snapshot, for a new sandbox: one of the snapshot's container (the pool
   * prefers it, knowing it holds the template), else a 503 (the files are there only). Answers
   * the image's WorkingDir when the snapshot is on an image.
   */
  async lease(s: Snapshot, trajectoryId: string): Promise<{ slot: LeasedSlot; workdir: string | undefined }> {
    const slot = await this.pool.acquire({ trajectoryId, template: s.id });
    try {
      if (slot.container.id !== s.containerId) throw new E2bApiError(503, `snapshot '${s.id}' lives on container ${s.containerId}, which has no free slot now: try again when one of its sandboxes ends`);
      const res = await slot.reset({ template: s.id });
      if (!res.success) throw new E2bApiError(500, `a slot could not be reset into snapshot '${s.id}': ${res.error}`);
      return { slot, workdir: res.image?.runtime.working_dir || undefined };
    } catch (err) {
      await this.pool.release(slot).catch(() => undefined);
      throw err;
    }
  }

  /** The live snapshot, or undefined (one whose container is gone is forgotten). */
  get(id: string): Snapshot | undefined {
    const s = this.byId.get(id);
    if (!s) return undefined;
    if (!this.container(s)) {
      this.byId.delete(id);
      this.pool.templates?.forget(s.containerId, id);
      return undefined;
    }
    return s;
  }

  /** Snapshots (newest first), of one sandbox or by name when asked. */
  list(filter: { sandboxId?: string | undefined; name?: string | undefined }): Snapshot[] {
    return [...this.byId.keys()]
      .map((id) => this.get(id))
      .filter((s): s is Snapshot => s !== undefined && (filter.sandboxId === undefined || s.sandboxId === filter.sandboxId) && (filter.name === undefined || s.id === filter.name || s.names.includes(filter.name)))
      .sort((a, b) => b.createdAt.getTime() - a.createdAt.getTime() || (a.id < b.id ? -1 : 1));
  }

  /** Deletes the snapshot (sandboxes made from it keep their files); false when there is none. */
  async delete(id: string): Promise<boolean> {
    const s = this.get(id);
    if (!s) return false;
    this.byId.delete(id);
    await this.drop(s);
    return true;
  }

  private async drop(s: Snapshot): Promise<void> {
    this.pool.templates?.forget(s.containerId, s.id);
    const c = this.container(s);
    if (c) await call<TemplateDeleteResponse>(c, "/templates/delete", { name: s.id });
  }

  /** The snapshot's container while it is up (a pool that lists none: as it was). */
  private container(s: Snapshot): ContainerInfo | undefined {
    if (!this.pool.containerList) return s.container;
    return this.pool.containerList().find((c) => c.id === s.containerId && c.state !== "lost");
  }
}

async function call<T>(c: ContainerInfo, path: string, body: Record<string, unknown>): Promise<T> {
  const res = await request(c.url + path, { method: "POST", dispatcher: agent, headers: { "content-type": "application/json", ...(c.token ? { authorization: `Bearer ${c.token}` } : {}) }, body: JSON.stringify(body) });
  const text = await res.body.text();
  if (res.statusCode !== 200) {
    let message = text;
    try {
      message = (JSON.parse(text) as { error?: string }).error ?? text;
    } catch {
      /* not JSON: keep the text */
    }
    throw new E2bApiError(res.statusCode === 404 ? 404 : res.statusCode >= 500 ? 500 : res.statusCode, `the snapshot's container answered ${res.statusCode}: ${message}`);
  }
  return JSON.parse(text) as T;
}
