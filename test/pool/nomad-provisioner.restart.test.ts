/**
 * A task restarted in place by Nomad's restart policy keeps its allocation ID but runs a
 * fresh server: the provisioner reports the old container gone and the restarted one as a
 * new container. (The emulator fails allocations instead of restarting them, so this uses a
 * scripted client that answers like Nomad's allocation list.)
 */
import { describe, expect, it } from "vitest";
import type { NomadClient } from "../../src/nomad/client.js";
import type { AllocListStub } from "../../src/nomad/schemas.js";
import { NomadProvisioner } from "../../src/pool/nomad-provisioner.js";
import type { ContainerGone, ProvisionerError } from "../../src/pool/provisioner.js";
import type { ContainerInfo } from "../../src/pool/types.js";

const JOB = "restart-job";

/** Just the calls the provisioner makes, answering from `allocs`; blocking reads wait for a change. */
class ScriptedNomad {
  readonly address = "http://nomad.scripted:4646";
  allocs: AllocListStub[] = [];
  private index = 10;
  private wake: (() => void) | undefined;

  set(allocs: AllocListStub[]): void {
    this.allocs = allocs;
    this.index++;
    this.wake?.();
  }
  async leader() {
    return "127.0.0.1:4647";
  }
  async readJob() {
    return null;
  }
  async registerJob() {
    return { EvalID: "e", EvalCreateIndex: this.index, JobModifyIndex: this.index };
  }
  async jobAllocations(_job: string, options: { index?: number; signal?: AbortSignal }) {
    if (options.index && options.index >= this.index) {
      await new Promise<void>((resolve) => {
        this.wake = resolve;
        options.signal?.addEventListener("abort", () => resolve(), { once: true });
        setTimeout(resolve, 2_000);
      });
    }
    options.signal?.throwIfAborted();
    return { allocations: structuredClone(this.allocs), index: this.index };
  }
  async readAllocation(id: string) {
    const a = this.allocs.find((x) => x.ID === id);
    return a ? { ...a, AllocatedResources: { Shared: { Ports: [{ Label: "http", Value: 25000, HostIP: "127.0.0.1" }] } } } : null;
  }
  async jobEvaluations() {
    return [];
  }
  async scaleTaskGroup() {
    return { EvalID: "e", EvalCreateIndex: this.index, JobModifyIndex: this.index };
  }
  async deregisterJob() {
    return { EvalID: "e", EvalCreateIndex: this.index, JobModifyIndex: this.index };
  }
  async close() {}
}

function alloc(state: "running" | "pending", restarts: number): AllocListStub {
  return {
    ID: "alloc-1",
    Name: `${JOB}.sandbox[0]`,
    JobID: JOB,
    TaskGroup: "sandbox",
    DesiredStatus: "run",
    ClientStatus: "running",
    TaskStates: {
      "sandbox-server": {
        State: state,
        Restarts: restarts,
        Events: restarts ? [{ Type: "Terminated", ExitCode: 137, DisplayMessage: "Exit Code: 137" }, { Type: "Restarting", DisplayMessage: "Task restarting in 5s" }] : [],
      },
    },
  } as AllocListStub;
}

describe("NomadProvisioner and in-place task restarts", () => {
  it("reports the restarted allocation as a new container and the old one gone", async () => {
    const nomad = new ScriptedNomad();
    const log: string[] = [];
    const ups: ContainerInfo[] = [];
    const gones: ContainerGone[] = [];
    const provisioner = new NomadProvisioner({ slotsPerContainer: 2, client: nomad as unknown as NomadClient, job: { jobId: JOB } });
    const waitFor = async (n: number) => {
      const deadline = Date.now() + 5_000;
      while (log.length < n) {
        if (Date.now() > deadline) throw new Error(`events so far: ${log.join(", ")}`);
        await new Promise((r) => setTimeout(r, 5));
      }
    };
    nomad.set([alloc("running", 0)]);
    await provisioner.start(
      {
        containerStarting: (id) => log.push(`starting ${id}`),
        containerUp: (info) => (log.push(`up ${info.id}`), ups.push(info)),
        containerGone: (g) => (log.push(`gone ${g.id}`), gones.push(g)),
        problem: (e: ProvisionerError) => log.push(`problem ${e.kind}`),
      },
      1,
    );
    try {
      await waitFor(2);
      expect(log).toEqual(["starting alloc-1", "up alloc-1"]);
      expect(ups[0]!.url).toBe("http://127.0.0.1:25000");
      nomad.set([alloc("pending", 1)]);
      await waitFor(4);
      expect(log.slice(2)).toEqual(["gone alloc-1", "starting alloc-1/restart-1"]);
      expect(gones[0]!.expected).toBe(false);
      expect(gones[0]!.reason).toMatch(/restarted in place: restart 1/);
      expect(gones[0]!.reason).toMatch(/Exit Code: 137/);
      nomad.set([alloc("running", 1)]);
      await waitFor(5);
      expect(log[4]).toBe("up alloc-1/restart-1");
      expect(ups[1]!.index).toBe(0);
    } finally {
      await provisioner.stop({ purge: true });
    }
  });
});
