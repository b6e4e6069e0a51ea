/**
 * The Nomad API emulator, driven through the real client: every allocation is a real
 * `slotpool sandbox-server` process (run `npm run build` first; `npm test` does).
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { allocationHttpAddress, allocationNameIndex, latestTaskEvents } from "../../src/nomad/allocation.js";
import { NomadClient } from "../../src/nomad/client.js";
import { NomadAclDeniedError, NomadError, NomadNotFoundError, NomadScaleBlockedError, NomadTimeoutError } from "../../src/nomad/errors.js";
import { describePlacementFailure } from "../../src/pool/nomad-placement.js";
import { sandboxJob } from "../../src/nomad/job.js";
import type { AllocListStub, NomadEvent } from "../../src/nomad/schemas.js";
import { startNomadEmulator, type NomadEmulator } from "../support/nomad-emulator.js";

let nomad: NomadEmulator;
let client: NomadClient;

beforeAll(async () => {
  nomad = await startNomadEmulator({ rescheduleDelayMs: 300 });
  client = new NomadClient({ address: nomad.address, retry: { attempts: 3, baseMs: 10, maxMs: 50 }, timeoutMs: 5_000 });
});
afterAll(async () => {
  await client?.close();
  await nomad?.stop();
});

type Json = Record<string, unknown>;
const running = (allocs: Json[]) => allocs.filter((a) => a["ClientStatus"] === "running");
const names = (allocs: Array<{ Name?: string | undefined } | Json>) => allocs.map((a) => String((a as Json)["Name"])).sort();

async function runningAllocs(jobId: string, n: number): Promise<Json[]> {
  return nomad.waitForAllocations(jobId, (a) => running(a).length === n && a.filter((x) => x["ClientStatus"] === "pending").length === 0);
}

describe("allocation lifecycle", () => {
  it("register → pending → running real sandbox servers, reachable at the port Nomad reports", async () => {
    const job = sandboxJob({ jobId: "life", count: 2, slots: 3, token: "sbx-token" });
    const reg = await client.registerJob(job);
    expect(reg.EvalID).toMatch(/^[0-9a-f-]{36}$/);

    // Placed at once, pending until the server listens.
    const first = await client.jobAllocations("life");
    expect(names(first.allocations)).toEqual(["life.sandbox[0]", "life.sandbox[1]"]);
    expect(first.allocations.every((a) => a.DesiredStatus === "run")).toBe(true);

    await runningAllocs("life", 2);
    const { allocations } = await client.jobAllocations("life");
    expect(allocations.map((a) => a.ClientStatus)).toEqual(["running", "running"]);
    // README "No ports here": stubs carry no AllocatedResources.
    expect(allocations.every((a) => allocationHttpAddress(a) === null)).toBe(true);

    for (const stub of allocations) {
      const alloc = await client.readAllocation(stub.ID);
      const types = alloc!.TaskStates?.["sandbox-server"]?.Events?.map((e) => e.Type);
      expect(types).toEqual(["Received", "Task Setup", "Driver", "Started"]);
      expect(alloc!.AllocatedResources?.Shared?.Ports?.[0]).toMatchObject({ Label: "http", To: 8080, HostIP: "127.0.0.1" });
      const address = allocationHttpAddress(alloc!);
      expect(address?.host).toBe("127.0.0.1");
      const health = (await (await fetch(`${address!.url}/health`)).json()) as { status: string; slots: number };
      expect(health).toMatchObject({ status: "ok", slots: 3 });
      // The job's token reached the server: /slots needs it.
      expect((await fetch(`${address!.url}/slots`)).status).toBe(401);
      expect((await fetch(`${address!.url}/slots`, { headers: { Authorization: "Bearer sbx-token" } })).status).toBe(200);
    }
    const readBack = await client.readJob("life");
    expect(readBack?.Status).toBe("running");
    expect(readBack?.TaskGroups?.[0]?.Count).toBe(2);
    // The docker task's TUN device (network-on slots need it) is accepted and kept.
    expect(readBack?.TaskGroups?.[0]?.Tasks?.[0]?.Config).toMatchObject({ devices: [{ host_path: "/dev/net/tun", container_path: "/dev/net/tun" }] });
  });

  it("delayAllocationStartMs keeps a new allocation pending that long", async () => {
    nomad.delayAllocationStartMs = 3_000;
    try {
      const started = Date.now();
      await client.registerJob(sandboxJob({ jobId: "slow-start", count: 1, slots: 1 }));
      // wait: well inside the 3 s delay (it was 400 of 800 ms: a loaded box's registration could outlast that)
      await new Promise((r) => setTimeout(r, 400));
      expect((await client.jobAllocations("slow-start")).allocations[0]?.ClientStatus).toBe("pending");
      await runningAllocs("slow-start", 1);
      expect(Date.now() - started).toBeGreaterThanOrEqual(3_000);
    } finally {
      nomad.delayAllocationStartMs = 0;
      await client.deregisterJob("slow-start", { purge: true });
    }
  });
});

describe("scaling", () => {
  it("scale-down stops the highest name indexes; scale-up refills the lowest free ones", async () => {
    await client.registerJob(sandboxJob({ jobId: "scale", count: 3, slots: 1 }));
    const initial = await runningAllocs("scale", 3);
    const idsByName = new Map(initial.map((a) => [a["Name"], a["ID"]]));

    await client.scaleTaskGroup("scale", "sandbox", 1, { message: "drain idle" });
    const down = await nomad.waitForAllocations("scale", (a) => a.filter((x) => x["ClientStatus"] === "complete").length === 2);
    const stopped = down.filter((a) => a["DesiredStatus"] === "stop");
    expect(names(stopped)).toEqual(["scale.sandbox[1]", "scale.sandbox[2]"]);
    expect(stopped.every((a) => a["DesiredDescription"] === "alloc not needed due to job update")).toBe(true);
    expect(names(running(down))).toEqual(["scale.sandbox[0]"]);

    const status = await client.scaleStatus("scale");
    expect(status?.TaskGroups?.["sandbox"]).toMatchObject({ Desired: 1, Placed: 1, Running: 1 });
    expect(status?.TaskGroups?.["sandbox"]?.Events?.[0]).toMatchObject({ Count: 1, PreviousCount: 3, Message: "drain idle" });

    await client.scaleTaskGroup("scale", "sandbox", 3);
    const up = await nomad.waitForAllocations("scale", (a) => running(a).length === 3);
    expect(names(running(up))).toEqual(["scale.sandbox[0]", "scale.sandbox[1]", "scale.sandbox[2]"]);
    // Names are reused, instances are new: identify sandboxes by ID.
    const reused = running(up).find((a) => a["Name"] === "scale.sandbox[2]")!;
    expect(reused["ID"]).not.toBe(idsByName.get("scale.sandbox[2]"));
    expect(allocationNameIndex(String(reused["Name"]))).toBe(2);
    await client.deregisterJob("scale", { purge: true });
  });

  it("re-register resets the count unless PreserveCounts is sent", async () => {
    await client.registerJob(sandboxJob({ jobId: "recount", count: 1, slots: 1 }));
    await client.scaleTaskGroup("recount", "sandbox", 2);
    await client.registerJob(sandboxJob({ jobId: "recount", count: 1, slots: 1 }), { preserveCounts: true });
    expect((await client.readJob("recount"))?.TaskGroups?.[0]?.Count).toBe(2);
    await client.registerJob(sandboxJob({ jobId: "recount", count: 1, slots: 1 }));
    expect((await client.readJob("recount"))?.TaskGroups?.[0]?.Count).toBe(1);
    await client.deregisterJob("recount", { purge: true });
  });

  it("a job with Nomad's default update block has deployments that block scaling; the sandbox job does not", async () => {
    const plain = sandboxJob({ jobId: "deploys", count: 0 });
    delete (plain as Json)["Update"];
    await client.registerJob(plain);
    const err = await client.scaleTaskGroup("deploys", "sandbox", 0).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(NomadScaleBlockedError);
    expect((err as NomadError).nomadMessage).toBe("job scaling blocked due to active deployment");
    // As a real 1.1.2 agent: the refused count is stored all the same, nothing is placed for it.
    expect((await client.readJob("deploys"))?.TaskGroups?.[0]?.Count).toBe(0);
    const blocked = await client.scaleTaskGroup("deploys", "sandbox", 1).catch((e: unknown) => e);
    expect(blocked).toBeInstanceOf(NomadScaleBlockedError);
    expect((await client.readJob("deploys"))?.TaskGroups?.[0]?.Count).toBe(1);
    expect(nomad.allocations("deploys")).toEqual([]);
    const { deployment } = await client.latestDeployment("deploys");
    expect(deployment).toMatchObject({ JobID: "deploys", Status: "running" });
    expect((await client.latestDeployment("no-such-job")).deployment).toBeNull();

    await client.registerJob(sandboxJob({ jobId: "no-deploys", count: 0 }));
    await expect(client.scaleTaskGroup("no-deploys", "sandbox", 0)).resolves.toMatchObject({ EvalID: expect.any(String) });
    // A job without deployments answers null, as a real agent does.
    expect((await client.latestDeployment("no-deploys")).deployment).toBeNull();
  });

  it("scale errors as Nomad words them", async () => {
    const missing = await client.scaleTaskGroup("ghost", "sandbox", 1).catch((e: unknown) => e);
    expect(missing).toBeInstanceOf(NomadNotFoundError);
    expect((missing as NomadError).nomadMessage).toBe('job "ghost" not found');
    await client.registerJob(sandboxJob({ jobId: "groups", count: 0 }));
    const badGroup = await client.scaleTaskGroup("groups", "workers", 1).catch((e: unknown) => e);
    expect((badGroup as NomadError).status).toBe(400);
    expect((badGroup as NomadError).nomadMessage).toBe('task group "workers" specified for scaling does not exist in job');
  });
});

describe("failures the pool must notice", () => {
  it("a killed allocation is failed within 2 s, seen by a blocking query and the event stream, then replaced", async () => {
    await client.registerJob(sandboxJob({ jobId: "crash", count: 1, slots: 1 }));
    const [victim] = await runningAllocs("crash", 1);
    const victimId = String(victim!["ID"]);
    const { index } = await client.jobAllocations("crash");

    const ac = new AbortController();
    const seen: NomadEvent[] = [];
    const streamDone = (async () => {
      for await (const e of client.eventStream({ topics: { Allocation: ["crash"] }, index, signal: ac.signal })) {
        seen.push(e);
        if (e.Payload?.Allocation?.ID === victimId && e.Payload.Allocation.ClientStatus === "failed") return e;
      }
      return undefined;
    })();

    const killedAt = Date.now();
    await nomad.killAllocation(victimId);
    let failed: AllocListStub | undefined;
    let cursor = index;
    while (!failed && Date.now() - killedAt < 10_000) {
      const res = await client.jobAllocations("crash", { index: cursor, waitMs: 2_000 });
      cursor = res.index;
      failed = res.allocations.find((a) => a.ID === victimId && a.ClientStatus === "failed");
    }
    expect(failed, "failed visible through a blocking query").toBeDefined();
    // bound: seen through the blocking query as the kill happens, not on a poll of its 2 s wait: 10 s leaves a loaded box room.
    expect(Date.now() - killedAt).toBeLessThan(10_000);
    expect(latestTaskEvents(failed!, 1)[0]).toMatch(/^sandbox-server: Terminated: Exit Code: 137, Signal: 9/);

    const event = await Promise.race([streamDone, new Promise<undefined>((r) => setTimeout(() => r(undefined), 2_000))]);
    ac.abort();
    expect(event?.Topic).toBe("Allocation");
    expect(event?.Payload?.Allocation?.TaskStates?.["sandbox-server"]?.State).toBe("dead");
    expect(event!.Payload!.Allocation!.Job).toBeUndefined();

    // Nomad reschedules the failed allocation under the same name.
    const after = await nomad.waitForAllocations("crash", (a) => running(a).length === 1);
    const replacement = running(after)[0]!;
    expect(replacement["Name"]).toBe("crash.sandbox[0]");
    expect(replacement["PreviousAllocation"]).toBe(victimId);
    await client.deregisterJob("crash", { purge: true });
  });

  it("loseNode marks allocations lost and replaces them on a fresh node", async () => {
    await client.registerJob(sandboxJob({ jobId: "lost", count: 1, slots: 1 }));
    const [before] = await runningAllocs("lost", 1);
    await nomad.loseNode();
    const after = await nomad.waitForAllocations("lost", (a) => running(a).length === 1);
    const lost = after.find((a) => a["ID"] === before!["ID"])!;
    expect(lost).toMatchObject({ ClientStatus: "lost", DesiredStatus: "stop" });
    expect(running(after)[0]!["NodeID"]).not.toBe(before!["NodeID"]);
    await client.deregisterJob("lost", { purge: true });
  });

  it("an image pull failure fails the allocation with a docker-like Driver Failure; it never runs", async () => {
    nomad.failImagePull("badimg");
    try {
      await client.registerJob(sandboxJob({ jobId: "badimg", count: 1, image: "registry.example/nope:1" }));
      const allocs = await nomad.waitForAllocations("badimg", (a) => a.some((x) => x["ClientStatus"] === "failed"));
      const failed = allocs.find((a) => a["ClientStatus"] === "failed")!;
      const full = await client.readAllocation(String(failed["ID"]));
      expect(latestTaskEvents(full!, 1)[0]).toMatch(/^sandbox-server: Driver Failure: Failed to pull `registry\.example\/nope:1`: Error response from daemon: pull access denied/);
      expect(full?.AllocatedResources?.Shared?.Ports ?? []).toEqual([]);
      expect(running(nomad.allocations("badimg"))).toEqual([]);
    } finally {
      await client.deregisterJob("badimg", { purge: true });
      nomad.clearImagePullFailures();
    }
  });

  it("failNext: 500 twice is retried by the client; 'hang' ends in a client timeout", async () => {
    const before = nomad.requests.filter((r) => r.path === "/v1/job/life/allocations").length;
    nomad.failNext("GET /v1/job/life/allocations", 500, 2, "rpc error: leader lost");
    const res = await client.jobAllocations("life");
    expect(res.allocations.length).toBeGreaterThan(0);
    expect(nomad.requests.filter((r) => r.path === "/v1/job/life/allocations").length - before).toBe(3);

    nomad.failNext(/^GET \/v1\/job\/life$/, "hang");
    const impatient = new NomadClient({ address: nomad.address, timeoutMs: 300, retry: { attempts: 1 } });
    const started = Date.now();
    await expect(impatient.readJob("life")).rejects.toBeInstanceOf(NomadTimeoutError);
    // bound: its 300 ms timeout, not the hang: 5 s leaves a loaded box room.
    expect(Date.now() - started).toBeLessThan(5_000);
    await impatient.close();

    nomad.failNext("POST /v1/jobs", 503, 5, "no leader");
    const err = await client.registerJob(sandboxJob({ jobId: "never" })).catch((e: unknown) => e);
    expect((err as NomadError).status).toBe(503);
    expect((err as NomadError).nomadMessage).toBe("no leader");
  });
});

describe("jobs, evaluations, blocking queries", () => {
  it("deregister keeps a stopped job readable; purge removes it but its allocations stay listed", async () => {
    await client.registerJob(sandboxJob({ jobId: "bye", count: 1, slots: 1 }));
    await runningAllocs("bye", 1);
    await client.deregisterJob("bye");
    const stopped = await client.readJob("bye");
    expect(stopped?.Stop).toBe(true);
    await nomad.waitForAllocations("bye", (a) => a.every((x) => x["ClientStatus"] === "complete"));
    expect((await client.readJob("bye"))?.Status).toBe("dead");
    await client.deregisterJob("bye", { purge: true });
    expect(await client.readJob("bye")).toBeNull();
    expect((await client.jobAllocations("bye")).allocations).toHaveLength(1);
    // Nomad answers 200 with zero values for a job that does not exist.
    expect((await client.deregisterJob("never-existed")).EvalID).toBe("");
  });

  it("unknown job: allocations [], readJob null, evaluations of a job", async () => {
    expect((await client.jobAllocations("nobody")).allocations).toEqual([]);
    expect(await client.readJob("nobody")).toBeNull();
    await client.registerJob(sandboxJob({ jobId: "evals", count: 0 }));
    await client.scaleTaskGroup("evals", "sandbox", 0);
    const evals = await client.jobEvaluations("evals");
    expect(evals.map((e) => e.TriggeredBy).sort()).toEqual(["job-register", "job-scaling"]);
    expect((await client.readEvaluation(evals[0]!.ID))?.Status).toBe("complete");
    expect(await client.readEvaluation("00000000-0000-0000-0000-000000000000")).toBeNull();
  });

  it("a blocking query with no change waits out its wait time and returns the same index", async () => {
    const { index } = await client.jobAllocations("nobody");
    const started = Date.now();
    const again = await client.jobAllocations("nobody", { index: nomad.index() + 1_000, waitMs: 300 });
    expect(Date.now() - started).toBeGreaterThanOrEqual(280);
    expect(again.index).toBeGreaterThanOrEqual(index);
  });

  it("listJobs with meta finds slotpool's jobs", async () => {
    const jobs = await client.listJobs({ meta: true });
    const life = jobs.find((j) => j.ID === "life");
    expect(life?.Meta?.["slotpool"]).toBe("true");
    expect((await client.listJobs({ prefix: "lif" })).map((j) => j.ID)).toEqual(["life"]);
  });
});

describe("ACL", () => {
  let secured: NomadEmulator;
  beforeAll(async () => {
    secured = await startNomadEmulator({ token: "root-secret" });
  });
  afterAll(async () => {
    await secured?.stop();
  });

  it("wrong or missing token → 403; leader needs none; the right token works", async () => {
    const anonymous = new NomadClient({ address: secured.address, retry: { attempts: 1 } });
    const wrong = new NomadClient({ address: secured.address, token: "guess", retry: { attempts: 1 } });
    const right = new NomadClient({ address: secured.address, token: "root-secret" });
    expect(await anonymous.leader()).toBe("127.0.0.1:4647");
    const denied = await anonymous.registerJob(sandboxJob({ count: 0 })).catch((e: unknown) => e);
    expect(denied).toBeInstanceOf(NomadAclDeniedError);
    expect((denied as NomadError).nomadMessage).toBe("Permission denied");
    const unknown = await wrong.readJob("x").catch((e: unknown) => e);
    expect(unknown).toBeInstanceOf(NomadAclDeniedError);
    expect((unknown as NomadError).nomadMessage).toBe("ACL token not found");
    expect(await right.readJob("x")).toBeNull();
    // Bearer works too (README "Token").
    const res = await fetch(`${secured.address}/v1/job/x`, { headers: { Authorization: "Bearer root-secret" } });
    expect(res.status).toBe(404);
    expect(await res.text()).toBe("job not found");
    expect(res.headers.get("content-type")).toMatch(/^text\/plain/);
    for (const c of [anonymous, wrong, right]) await c.close();
  });
});

describe("datacenters", () => {
  it("places only in the node's datacenter (dc1); \"*\" matches as in Nomad >= 1.6, not as in 1.1", async () => {
    await client.registerJob(sandboxJob({ jobId: "dc-elsewhere", count: 2, datacenters: ["eu-1"] }));
    const evals = await client.jobEvaluations("dc-elsewhere");
    expect(evals[0]?.FailedTGAllocs?.["sandbox"]).toMatchObject({ NodesEvaluated: 0, NodesAvailable: { "eu-1": 0 }, CoalescedFailures: 1 });
    expect(describePlacementFailure(evals[0])).toMatch(/no nodes available in the datacenters/);
    expect(nomad.allocations("dc-elsewhere")).toEqual([]);
    await client.registerJob(sandboxJob({ jobId: "dc-default", count: 1 }));
    await nomad.waitForAllocations("dc-default", (a) => a.length === 1);
    await client.registerJob(sandboxJob({ jobId: "dc-glob", count: 1, datacenters: ["*"] }));
    await nomad.waitForAllocations("dc-glob", (a) => a.length === 1);
    for (const id of ["dc-elsewhere", "dc-default", "dc-glob"]) await client.deregisterJob(id, { purge: true });

    const old = await startNomadEmulator({ datacenterGlobs: false });
    try {
      const c = new NomadClient({ address: old.address, retry: { attempts: 1 } });
      await c.registerJob(sandboxJob({ jobId: "dc-star", count: 1, datacenters: ["*"] }));
      expect((await c.jobEvaluations("dc-star"))[0]?.FailedTGAllocs?.["sandbox"]).toMatchObject({ NodesAvailable: { "*": 0 } });
      expect(old.allocations("dc-star")).toEqual([]);
      await c.close();
    } finally {
      await old.stop();
    }
  });
});

describe("shutdown", () => {
  it("stop() returns promptly with allocations still waiting to start, hung requests and open streams", async () => {
    const emu = await startNomadEmulator();
    const c = new NomadClient({ address: emu.address, retry: { attempts: 1 }, timeoutMs: 10_000 });
    emu.delayAllocationStartMs = 60_000;
    await c.registerJob(sandboxJob({ jobId: "never-starts", count: 2 }));
    emu.failNext("GET /v1/job/never-starts", "hang");
    const hung = c.readJob("never-starts").catch((e: unknown) => e);
    let firstEvent!: () => void;
    const streaming = new Promise<void>((r) => (firstEvent = r));
    const stream = (async () => {
      let n = 0;
      for await (const _ of c.eventStream({ topics: { Allocation: ["never-starts"] }, index: 1 })) {
        n++;
        firstEvent();
      }
      return n;
    })();
    // Both must be open at the emulator before it stops (a stop before the stream's request
    // arrived would be a refused connection, not the stream this case is about): the stream
    // has delivered an event, and the emulator has recorded the hung request.
    await Promise.race([streaming, stream]);
    while (!emu.requests.some((r) => r.method === "GET" && r.path === "/v1/job/never-starts")) {
      // wait: polls the emulator's request log (no event marks a request that is never answered); each turn 10 ms
      await new Promise((r) => setTimeout(r, 10));
    }
    const started = Date.now();
    await emu.stop();
    // bound: stop ends the hung request and the stream instead of waiting for them (forever): 10 s leaves a loaded box room.
    expect(Date.now() - started).toBeLessThan(10_000);
    expect(await hung).toBeInstanceOf(NomadError);
    expect(await stream).toBeGreaterThan(0);
    await c.close();
  });
});

describe("event stream liveness", () => {
  it("heartbeats keep a quiet stream open; silence past idleTimeoutMs ends it with NomadTimeoutError", async () => {
    const chatty = await startNomadEmulator({ heartbeatMs: 100 });
    const silent = await startNomadEmulator({ heartbeatMs: 60_000 });
    try {
      const quiet = async (address: string, idleTimeoutMs: number, forMs: number): Promise<unknown> => {
        const ac = new AbortController();
        const timer = setTimeout(() => ac.abort(new Error("test done")), forMs);
        const c = new NomadClient({ address });
        try {
          for await (const _ of c.eventStream({ topics: { Allocation: ["nothing"] }, signal: ac.signal, idleTimeoutMs })) {
            // no events expected
          }
          return "ended";
        } catch (err) {
          return err;
        } finally {
          clearTimeout(timer);
          await c.close();
        }
      };
      const started = Date.now();
      const timedOut = await quiet(silent.address, 300, 5_000);
      expect(timedOut).toBeInstanceOf(NomadTimeoutError);
      // bound: its 300 ms idle timeout, not the 5 s the test allows: 4 s tells them apart on a loaded box.
      expect(Date.now() - started).toBeLessThan(4_000);
      const alive = await quiet(chatty.address, 300, 1_000);
      expect((alive as Error).message).toBe("test done");
    } finally {
      await chatty.stop();
      await silent.stop();
    }
  });
});
