import type { ImageAffinity } from "./image-affinity.js";
import { imageKey } from "./image-key.js";
import type { ContainerRecord, SlotRecord } from "./records.js";
import type { TemplateAffinity } from "./template-affinity.js";

/** What a trajectory would like its slot's container to hold already (AcquireOptions). */
export interface PlacementWish {
  template?: string | undefined;
  image?: string | undefined;
}

/** A wish for the server's own system (no image, no template): a slot left in an image is reset back before use. */
export function plainWish(wish: PlacementWish): boolean {
  return wish.image === undefined && wish.template === undefined;
}

/** What placement needs from the pool. */
export interface PlacementHost {
  /** Live and checking containers, lowest index first (packing order). */
  containers(): readonly ContainerRecord[];
  readonly templates: Pick<TemplateAffinity, "preferred">;
  readonly images: Pick<ImageAffinity, "preferred">;
}

/**
 * Which free slot a trajectory gets, and where a returned slot goes in its container's stack:
 * - packing: the lowest-index ready container with a free slot, so scale-down finds the
 *   highest ones empty;
 * - a trajectory of a task image (no template) takes a free slot already reset into that image
 *   when there is one (its release reset kept the image): no reset of its own, its sandbox warm;
 * - affinity first: a container holding the trajectory's template, else its task image
 *   (ImageAffinity), when one has a free slot;
 * - within a container, a trajectory that wants no image takes a slot whose root is the
 *   server's own system when it has one (a slot left in an image costs it a reset);
 * - a node that just lost a container may be going down: its slots go last (a trajectory
 *   retried after a loss lands on another node when one has room), for `suspectMs`;
 * - within a container, a slot just reset goes last (its namespace is being rebuilt in the
 *   background; the others are warm), and otherwise the lowest slot number is on top.
 */
export class SlotPlacement {
  /** Nodes that lost a container lately, and until when (performance.now()). */
  private readonly suspectNodes = new Map<string, number>();

  constructor(
    private readonly host: PlacementHost,
    private readonly suspectMs: number,
    private readonly now: () => number = () => performance.now(),
  ) {}

  /** Takes the free slot `wish` should get out of its container's stack, or undefined when no ready container has one. */
  take(wish: PlacementWish = {}): SlotRecord | undefined {
    const containers = this.host.containers();
    if (wish.image !== undefined && wish.template === undefined) {
      const warm = this.warmSlot(containers, imageKey(wish.image));
      if (warm) return warm;
    }
    const preferred =
      (wish.template !== undefined ? this.host.templates.preferred(containers, wish.template) : undefined) ??
      (wish.image !== undefined ? this.host.images.preferred(containers, wish.image) : undefined);
    const order = preferred ? [preferred, ...containers] : containers;
    const pass = (avoidSuspect: boolean) => order.find((c) => c.state === "ready" && c.free.length > 0 && !(avoidSuspect && this.suspect(c)));
    const c = pass(true) ?? (this.suspectNodes.size > 0 ? pass(false) : undefined);
    if (!c) return undefined;
    if (plainWish(wish)) {
      // The topmost slot whose root is the server's own system, if the container has one.
      for (let i = c.free.length - 1; i >= 0; i--) if (c.free[i]!.root === undefined) return c.free.splice(i, 1)[0];
    }
    return c.free.pop();
  }

  /** A free slot already reset into the image `key`, lowest container first (nodes under suspicion last). */
  private warmSlot(containers: readonly ContainerRecord[], key: string): SlotRecord | undefined {
    for (const avoidSuspect of this.suspectNodes.size > 0 ? [true, false] : [true]) {
      for (const c of containers) {
        if (c.state !== "ready" || (avoidSuspect && this.suspect(c))) continue;
        for (let i = c.free.length - 1; i >= 0; i--) if (c.free[i]!.root?.key === key) return c.free.splice(i, 1)[0];
      }
    }
    return undefined;
  }

  /** Puts a free slot back on its container's stack. */
  insert(container: ContainerRecord, record: SlotRecord, justReset = false): void {
    const free = container.free;
    if (justReset && free.length > 0) {
      // Bottom of the stack: handed out after every other free slot of this container.
      free.unshift(record);
      return;
    }
    // Keep the lowest slot number on top so a container's slots are reused in order.
    const n = Number(record.slotId.slice(5));
    let i = free.length;
    while (i > 0 && Number(free[i - 1]!.slotId.slice(5)) < n) i--;
    free.splice(i, 0, record);
  }

  /** `node` lost a container: its slots go last for a while. */
  suspectNode(node: string): void {
    this.suspectNodes.set(node, this.now() + this.suspectMs);
  }

  private suspect(c: ContainerRecord): boolean {
    const node = c.info.node;
    if (node === undefined || this.suspectNodes.size === 0) return false;
    const until = this.suspectNodes.get(node);
    if (until === undefined) return false;
    if (until > this.now()) return true;
    this.suspectNodes.delete(node);
    return false;
  }
}
