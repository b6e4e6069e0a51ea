/**
 * A small Provisioner for the env tests: each container is a real `slotpool sandbox-server`
 * child process (startSandboxProcess). `kill(index)` SIGKILLs one, as a crashed container.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Provisioner, ProvisionerEvents } from "../../../src/pool/provisioner.js";
import { startSandboxProcess, type SandboxProcess } from "../../../src/pool/sandbox-process.js";

export class ProcessProvisioner implements Provisioner {
  readonly kind = "test-process";
  private events: ProvisionerEvents | undefined;
  private readonly running = new Map<number, { id: string; proc: SandboxProcess; expected: boolean }>();
  private target = 0;
  private dataRoot: string | undefined;
  private seq = 0;
  private stopped = false;

  constructor(private readonly slots: number) {}

  async start(events: ProvisionerEvents, initialCount: number): Promise<void> {
    this.events = events;
    this.dataRoot = await mkdtemp(join(tmpdir(), "env-test-prov-"));
    await this.setTargetCount(initialCount);
  }

  async setTargetCount(count: number): Promise<void> {
    this.target = count;
    await this.converge();
  }

  private async converge(): Promise<void> {
    if (this.stopped) return;
    const starts: Promise<void>[] = [];
    for (let index = 0; index < this.target; index++) {
      if (this.running.has(index)) continue;
      starts.push(this.launch(index));
    }
    for (const [index, c] of this.running) {
      if (index >= this.target) {
        c.expected = true;
        void c.proc.stop(500);
      }
    }
    await Promise.all(starts);
  }

  private async launch(index: number): Promise<void> {
    const id = `proc-${index}-${++this.seq}`;
    this.events!.containerStarting(id, index);
    const dataDir = join(this.dataRoot!, id);
    const proc = await startSandboxProcess({ slots: this.slots, dataDir });
    const entry = { id, proc, expected: false };
    this.running.set(index, entry);
    void proc.exited.then(({ code, signal }) => {
      if (this.running.get(index) === entry) this.running.delete(index);
      this.events?.containerGone({ id, index, reason: `sandbox server exited (code ${code}, signal ${signal})`, expected: entry.expected || this.stopped });
      if (!this.stopped && !entry.expected && index < this.target) void this.converge();
    });
    this.events!.containerUp({ id, index, url: proc.url, slots: this.slots });
  }

  /** SIGKILLs the container at `index` (its slots are lost). */
  kill(index: number): boolean {
    const c = this.running.get(index);
    if (!c) return false;
    c.proc.child.kill("SIGKILL");
    return true;
  }

  containerIds(): string[] {
    return [...this.running.values()].map((c) => c.id);
  }

  async stop(): Promise<void> {
    this.stopped = true;
    await Promise.all([...this.running.values()].map((c) => c.proc.stop(1000)));
    if (this.dataRoot) await rm(this.dataRoot, { recursive: true, force: true });
  }
}
