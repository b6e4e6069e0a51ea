import { SlotpoolError } from "../../protocol/errors.js";
import type { Logger } from "pino";
import type { Ids } from "./fork-mount.js";
import type { CopyStage } from "./copy-stage.js";
import type { NextDisk, SlotDisks } from "../workspace/slot-disk.js";
import type { SlotTemplates } from "../templates/slot-templates.js";
import type { Template } from "../templates/templates.js";
import type { Slot } from "../core/slot.js";
import type { TerminalState } from "../tools/stateful.js";

/** The shapes fork.ts works with (its layers, views, snapshot and preparations) and its small helpers. */

export type ForkMode = "overlay" | "copy";

export interface Layer {
  /** Its own read-only handle (what views use: a detached mount, or a mount, see ForkMounter): alive while the layer is, also after its slot's disk is replaced by a reset. */
  dir: string;
  /** Where its files lie: on the disk of the slot that wrote them (deleted from there if that disk is still the slot's). */
  src: string;
  owner: Ids;
  refs: number;
  /** Its id-mapped handles by reader ("uid:gid"): made once, kept as long as the layer. */
  clones: Map<string, Promise<string>>;
}

/** A slot whose workspace is a fork view (parent after a fork, or a child). */
export interface ForkView {
  /** Top first. */
  layers: Layer[];
  /** The handle each layer is mounted into this view from (the dir, or its id-mapped clone); the template's lower is not among them. */
  lowers: string[];
  upper: string;
  work: string;
  /** Overlays stacked on the workspace by forks (unmounted at release): 1, unless the kernel cannot mount beneath. */
  stacked: number;
  /** Layers of views replaced while stacked beneath this one (a kernel without MOVE_MOUNT_BENEATH): released with it. */
  retired?: Layer[];
}

/** What the fork needs from the service (implemented by SandboxService). */
export interface ForkHost {
  readonly slots: readonly Slot[];
  readonly disks: SlotDisks;
  readonly templates: SlotTemplates;
  readonly logger: Logger;
  readonly stateDir: string;
  /** Kills every process of the slot and ends its terminal (as reset does first). */
  stopSlot(slot: Slot): Promise<void>;
  /** The reset's workspace steps: its view detached, a fresh empty disk, then a view of `template` if named. */
  resetWorkspace(slot: Slot, template: string | undefined): Promise<void>;
  /** Deletes a tree in the background (tree-removal.ts). */
  discard(path: string): void;
  /** Copies the slot's workspace into the empty dir `to` inside the slot's sandbox, as its uid (sandboxed-copy.ts). */
  copyWorkspace(slot: Slot, to: string): Promise<void>;
  /** Stops the slot's command namespaces only (the terminal stays). */
  stopCommandNamespaces(slot: Slot): Promise<void>;
  /** A process in each live command namespace of the slot. */
  commandNamespacePids(slot: Slot): Promise<number[]>;
  /** The next command of each command namespace enters /workspace again. */
  reanchorCommands(slot: Slot): void;
  warm(slot: Slot): void;
  terminalPid(slot: Slot): number | undefined;
  terminalState(slot: Slot): TerminalState | undefined;
  seedTerminal(slot: Slot, state: TerminalState): void;
  reanchorTerminal(slot: Slot): void;
}

export interface Snapshot {
  mode: ForkMode;
  parent: Slot;
  terminal: TerminalState;
  template: string | undefined;
  layers: Layer[];
  /** Drops the fork's own references once every child holds its own. */
  done: () => void;
}

export interface Prepared {
  /** The child's handle of each layer of the snapshot, top first. */
  lowers: string[];
  /** Fresh from a reset: no reset needed. */
  fresh: boolean;
  /** A used child's new disk, beside its current one. */
  disk?: NextDisk;
  /** The child's new view, mounted detached. */
  view?: PreparedView;
  /** The parent's template as the child reads it (its reference taken; `handle`: an id-mapped handle to drop). */
  template?: { t: Template; lower: string; handle: boolean };
  /** Copy mode: the parent's tree, staged beside the child's workspace. */
  copy?: CopyStage;
}

export interface PreparedView {
  /** The detached overlay (ForkMounter.overlayDetached, lane = the child's index). */
  mount: string;
  upper: string;
  work: string;
}

/**
 * Tests only: a failure injected at a step of a fork for a child (test/sandbox/fork-atomic.test.ts).
 * SLOTPOOL_TEST_FORK_FAIL lists `slot_3` (start of its preparation), `slot_3@disk` (its new disk
 * made), `slot_3@template` (its handle of the parent's template made, if
 * the parent is a template view), `slot_3@view` (its view mounted, detached), `slot_3@copy` (copy
 * mode: the parent's tree copied into the staging dir, not yet given to the child's uid).
 */
export function failpoint(child: Slot, step: string): void {
  const injected = process.env.SLOTPOOL_TEST_FORK_FAIL;
  if (!injected) return;
  const name = step ? `${child.id}@${step}` : child.id;
  if (injected.split(",").includes(name)) throw new Error(`a failure injected for ${name} (SLOTPOOL_TEST_FORK_FAIL)`);
}

/** A child could not be prepared for the fork: no child was changed (code FORK_PREPARE). */
export class ForkPrepareError extends SlotpoolError {
  override name = "ForkPrepareError";
  constructor(child: Slot, cause: unknown) {
    super(`preparing ${child.id} failed: ${cause instanceof Error ? cause.message : String(cause)}`, { cause });
  }
}

export function me(): Ids {
  return { uid: process.getuid?.() ?? 0, gid: process.getgid?.() ?? 0 };
}

export function optional(s: string | undefined): string[] {
  return s === undefined ? [] : [s];
}
