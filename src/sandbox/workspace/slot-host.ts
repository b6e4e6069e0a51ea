import type { Logger } from "pino";
import type { SlotCgroups } from "../isolation/cgroups.js";
import type { BwrapProbe, ImageRootSource } from "../isolation/isolation.js";
import type { SlotNetworks } from "../isolation/slot-netns.js";
import type { SlotBootIds } from "../isolation/boot-id.js";
import type { CommandLimits } from "../isolation/limits.js";
import type { CappedOutput } from "../run/output.js";
import type { RunResult } from "../run/runner.js";
import type { InternetAccess } from "../isolation/network.js";
import type { Slot } from "../core/slot.js";
import type { SlotDisks } from "./slot-disk.js";
import type { MountHelper } from "./mount-helper.js";
import type { TreeRemoval } from "./tree-removal.js";
import type { ToolOutcome } from "../core/tool-outcome.js";

/**
 * What the bash and stateful runners need from the service that owns the slots. An
 * interface of its own so the runners do not import the service that constructs them
 * (that was an import cycle); SandboxService implements it.
 */
export interface SlotHost {
  readonly slots: readonly Slot[];
  readonly limits: CommandLimits;
  readonly bwrap: BwrapProbe;
  readonly logger: Logger;
  readonly defaultAllowNetwork: boolean;
  /** The network setting a slot's namespace is started ahead for, before its first `bash` call. */
  readonly prewarmNetwork: boolean;
  readonly spawnerPath: string | null;
  readonly spawnerReason: string | undefined;
  readonly cgroups: SlotCgroups;
  readonly stateDir: string;
  /** RLIMIT_AS for every command where no slot cgroup bounds memory (0: none). */
  readonly addressSpaceBytes: number;
  /** How a slot with network on reaches the internet (undefined: loopback only). */
  readonly internetAccess: InternetAccess | undefined;
  /** Why network on is unavailable (when `internetAccess` is undefined). */
  readonly internetReason: string | undefined;
  readonly disks: SlotDisks;
  /** The mount helper, where the server may mount and it could be built. */
  readonly mountHelper: MountHelper | null;
  /** Whether this server may mount (root, or not root in a user namespace of its own). */
  readonly mayMount: boolean;
  /** Deletes trees a slot left, in child processes (never on the event loop). */
  readonly removal: TreeRemoval;
  /** Each slot's image root, if its root is an image (src/sandbox/images/). */
  readonly imageRoots: ImageRootSource;
  /** Each slot's shared network namespaces (process sessions; an image root's commands with network on). */
  readonly slotNetworks: SlotNetworks;
  /** Each slot's boot id, bound into its sandboxes and renewed when all its processes have ended. */
  readonly bootIds: SlotBootIds;
  /** Whether a call asking for `requested` network gets it (network on needs internet access). */
  effectiveNetwork(requested: boolean): boolean;
  identity(slot: Slot, user?: { name: string; home: string }): { passwd: string; group: string };
  newOutputName(): string;
  outcome(res: RunResult, output: CappedOutput, ctx: { sandboxed: boolean; networkIsolated: boolean; timeoutS: number; abortReason?: unknown }): ToolOutcome;
}
