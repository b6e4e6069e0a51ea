import { randomUUID } from "node:crypto";
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";

/** Where Linux says which boot this is (a random UUID made at each boot). */
export const BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id";

/**
 * A boot id per slot: each slot's sandboxes see a file of the server's bound read-only over
 * BOOT_ID_PATH, and a new random id is written into it whenever every process of the slot
 * has ended (a reset, a fork into the slot, E2B's filesystem-only pause or cold boot through
 * `POST /processes/kill-all`). So "the boot id changed" means what it means on a machine: no
 * process of before is left, what remains is the files. It also keeps the host's own boot id
 * out of the slots (slots could otherwise tell they share a host).
 *
 * The id is written in place (the same inode): sandboxes started earlier (the one a slot keeps
 * started ahead) bind the file, not its contents, so they see the new id too. Costs one
 * 37-byte write per reset.
 */
export class SlotBootIds {
  private readonly ready = new Set<number>();

  /** `dir`: in the server's state dir, which slot uids can traverse (bubblewrap opens the file as them). */
  constructor(private readonly dir: string) {}

  /** The host file holding the slot's boot id (made, with a fresh id, on first use). */
  file(slot: { index: number }): string {
    const f = join(this.dir, `slot_${slot.index}`);
    if (!this.ready.has(slot.index)) {
      if (!existsSync(f)) {
        mkdirSync(this.dir, { recursive: true, mode: 0o711 });
        writeFileSync(f, newBootId(), { mode: 0o644 });
      }
      this.ready.add(slot.index);
    }
    return f;
  }

  /** A new boot id for the slot (call once every process of the slot has ended). */
  renew(slot: { index: number }): void {
    // flag "w": truncated and rewritten, never replaced, so every bind of it shows the new id.
    writeFileSync(this.file(slot), newBootId(), { flag: "w" });
  }

  /** The slot's current boot id (tests, logs). */
  current(slot: { index: number }): string {
    return readFileSync(this.file(slot), "utf8").trim();
  }
}

/** The kernel's format: a lowercase random UUID and a newline. */
function newBootId(): string {
  return `${randomUUID()}\n`;
}
