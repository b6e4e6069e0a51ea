/**
 * Run by test/sandbox/template-view-race.test.ts in namespaces of its own (as a sandbox
 * server runs: `unshare --mount`, or a user namespace not root), so that template views are
 * overlay mounts and slot disks tmpfs mounts, as in production.
 *
 * One in-process SandboxService with one slot. Each round resets the slot into template
 * `b` (a trajectory then writes a file of its own), then resets it again — into template
 * `a`, or plainly — with the slot's namespace warmed (what the warm timer of an earlier
 * reset does when it fires, WARM_AFTER_RESET_MS after that reset) at one step boundary of
 * that reset, and waited for, so the worst timing happens every time instead of once in a
 * thousand runs on a loaded machine. Then it lists /workspace from the slot's own sandbox.
 * Prints one JSON line: {point, template, ls} per round.
 *
 * Usage: node --import tsx warm-mid-reset.ts DATA_DIR
 */
import { silentLogger } from "../../../src/observability/logger.js";
import { SandboxService } from "../../../src/sandbox/service/service.js";

const dataDir = process.argv[2]!;
const svc = new SandboxService({ slots: 1, dataDir, logger: silentLogger(), defaultAllowNetwork: false });
const slot = svc.slots[0]!;
const bash = async (command: string) => (await svc.execute(svc.parseCall({ slot_id: "slot_0", tool: "bash", args: { command } }))).output.trim();

// The reset's steps after the slot's processes are dead (service.ts reset): the old view
// detached, the workspace emptied (a fresh disk), the new view attached.
const steps: Record<"detach" | "empty" | "attach", readonly [Record<string, unknown>, string]> = {
  detach: [svc.templates as unknown as Record<string, unknown>, "detach"],
  empty: [svc as unknown as Record<string, unknown>, "emptyWorkspace"],
  attach: [svc.templates as unknown as Record<string, unknown>, "attach"],
};
let armed: keyof typeof steps | undefined;
for (const [point, [owner, method]] of Object.entries(steps) as Array<[keyof typeof steps, (typeof steps)[keyof typeof steps]]>) {
  const original = (owner[method] as (...a: unknown[]) => Promise<unknown>).bind(owner);
  owner[method] = async (...args: unknown[]) => {
    if (armed === point) {
      armed = undefined;
      await (svc as unknown as { bash: { warm(s: typeof slot): Promise<void> } }).bash.warm(slot);
    }
    return original(...args);
  };
}

try {
  for (const name of ["a", "b"]) {
    const r = await svc.templates.build({ name, setup: [`echo ${name} > ${name}.txt`] });
    if (!r.success) throw new Error(`template ${name}: ${r.error}`);
  }
  for (const point of Object.keys(steps) as Array<keyof typeof steps>) {
    for (const template of ["a", undefined]) {
      await svc.reset(slot, "b");
      await bash("echo mine > left-by-the-last-trajectory");
      armed = point;
      const r = await svc.reset(slot, template);
      if (!r.success) throw new Error(`reset: ${r.error}`);
      console.log(JSON.stringify({ point, template: template ?? null, armedLeft: armed !== undefined, ls: await bash("ls -A /workspace | tr '\\n' ' '") }));
    }
  }
} finally {
  await svc.close();
}
