import { randomBytes } from "node:crypto";
import { chmodSync, mkdtempSync, rmSync } from "node:fs";
import { Socket, createServer, type Server } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Provisioner, ProvisionerEvents } from "../../../src/pool/provisioner.js";
import { startSandboxProcess, type SandboxProcess } from "../../../src/pool/sandbox-process.js";

/**
 * Test double: containers are real sandbox servers, each reached through a TCP proxy this
 * provisioner controls. `freeze(id)` turns a container into one that hangs: it still
 * accepts connections but never answers (in-flight and new requests alike), as a wedged
 * container or a black-holed network would. `hungFromStart` makes new containers hang
 * before they ever answered /health.
 */
interface Container {
  id: string;
  index: number;
  token: string;
  proc: SandboxProcess | undefined;
  proxy: Server;
  sockets: Set<Socket>;
  frozen: boolean;
}

export class FreezableProvisioner implements Provisioner {
  readonly kind = "freezable";
  hungFromStart = false;
  private readonly base = mkdtempSync(join(tmpdir(), "slotpool-freeze-"));
  private readonly containers = new Map<string, Container>();
  private events!: ProvisionerEvents;
  private next = 0;
  private stopped = false;
  /** Launches still starting: stop() waits for them, so no server outlives the test. */
  private readonly launching = new Set<Promise<void>>();

  constructor(private readonly slots: number) {
    chmodSync(this.base, 0o755);
  }

  async start(events: ProvisionerEvents, initialCount: number): Promise<void> {
    this.events = events;
    await this.setTargetCount(initialCount);
  }

  async setTargetCount(count: number): Promise<void> {
    const live = [...this.containers.values()].filter((c) => !c.frozen);
    for (let i = live.length; i < count; i++) this.track(this.launch());
  }

  async replaceContainer(id: string): Promise<void> {
    const c = this.containers.get(id);
    if (!c) return;
    await this.remove(c, "replaced after failing health checks", false);
    this.track(this.launch());
  }

  freeze(id: string): void {
    const c = this.containers.get(id);
    if (!c) throw new Error(`no container ${id}`);
    c.frozen = true;
    for (const s of c.sockets) s.unpipe();
  }

  ids(): string[] {
    return [...this.containers.keys()];
  }

  async stop(): Promise<void> {
    this.stopped = true;
    await Promise.all([...this.launching]);
    for (const c of [...this.containers.values()]) await this.remove(c, "stopped", true);
    rmSync(this.base, { recursive: true, force: true });
  }

  private track(p: Promise<void>): void {
    const tracked = p.catch(() => undefined).finally(() => this.launching.delete(tracked));
    this.launching.add(tracked);
  }

  private async launch(): Promise<void> {
    if (this.stopped) return;
    const index = this.next++;
    const id = `frz-${index}-${randomBytes(3).toString("hex")}`;
    const token = randomBytes(12).toString("hex");
    const c: Container = { id, index, token, proc: undefined, proxy: createServer(), sockets: new Set(), frozen: this.hungFromStart };
    this.containers.set(id, c);
    this.events.containerStarting(id, index);
    c.proc = await startSandboxProcess({ slots: this.slots, dataDir: join(this.base, id), token });
    if (this.stopped) return; // stop() removes it once this launch settles
    c.proxy.on("connection", (client) => {
      c.sockets.add(client);
      client.on("close", () => c.sockets.delete(client));
      client.on("error", () => undefined);
      if (c.frozen) return; // accepted, never answered
      const upstream = new Socket();
      upstream.on("error", () => client.destroy());
      client.on("error", () => upstream.destroy());
      upstream.connect(c.proc!.port, "127.0.0.1", () => {
        if (c.frozen) return;
        client.pipe(upstream);
        upstream.pipe(client);
      });
      c.sockets.add(upstream);
      upstream.on("close", () => c.sockets.delete(upstream));
    });
    await new Promise<void>((r) => c.proxy.listen(0, "127.0.0.1", () => r()));
    const port = (c.proxy.address() as { port: number }).port;
    this.events.containerUp({ id, index, url: `http://127.0.0.1:${port}`, token, slots: this.slots });
  }

  private async remove(c: Container, reason: string, expected: boolean): Promise<void> {
    this.containers.delete(c.id);
    for (const s of c.sockets) s.destroy();
    await new Promise<void>((r) => c.proxy.close(() => r()));
    await c.proc?.stop(2_000);
    this.events.containerGone({ id: c.id, index: c.index, reason, expected });
  }
}
