import { describe, expect, it } from "vitest";
import { allocationHttpAddress, allocationNameIndex, describeTaskEvent, isAllocationRunning, isAllocationTerminal, latestTaskEvents } from "../../src/nomad/allocation.js";
import { nomadOptionsFromEnv } from "../../src/nomad/config.js";
import { backoffDelayMs, sleep } from "../../src/nomad/retry.js";
import { AllocationSchema, type Allocation } from "../../src/nomad/schemas.js";

const alloc = (fields: Record<string, unknown>): Allocation => AllocationSchema.parse({ ID: "a1", ...fields });

describe("allocationHttpAddress", () => {
  it("prefers Shared.Ports (HostIP:Value), the canonical mapping", () => {
    const a = alloc({
      AllocatedResources: {
        Shared: {
          Ports: [{ Label: "metrics", Value: 25000, HostIP: "10.0.0.5" }, { Label: "http", Value: 23456, To: 8080, HostIP: "10.0.0.5" }],
          Networks: [{ IP: "10.9.9.9", DynamicPorts: [{ Label: "http", Value: 1111 }] }],
        },
      },
    });
    expect(allocationHttpAddress(a)).toEqual({ host: "10.0.0.5", port: 23456, url: "http://10.0.0.5:23456" });
    expect(allocationHttpAddress(a, "metrics")?.port).toBe(25000);
    expect(allocationHttpAddress(a, "grpc")).toBeNull();
  });

  it("falls back to Shared.Networks[].DynamicPorts with the network IP", () => {
    const a = alloc({ AllocatedResources: { Shared: { Networks: [{ Mode: "host", IP: "192.168.1.20", DynamicPorts: [{ Label: "http", Value: 31000, To: 8080 }] }] } } });
    expect(allocationHttpAddress(a)?.url).toBe("http://192.168.1.20:31000");
  });

  it("brackets IPv6 hosts", () => {
    const a = alloc({ AllocatedResources: { Shared: { Ports: [{ Label: "http", Value: 20001, HostIP: "fd00::1" }] } } });
    expect(allocationHttpAddress(a)).toEqual({ host: "[fd00::1]", port: 20001, url: "http://[fd00::1]:20001" });
  });

  it("ignores a mapping without a host port (Value omitted as zero) and a stub without resources", () => {
    expect(allocationHttpAddress(alloc({ AllocatedResources: { Shared: { Ports: [{ Label: "http", To: 8080 }] } } }))).toBeNull();
    expect(allocationHttpAddress(alloc({}))).toBeNull();
  });
});

describe("allocation names, states and events", () => {
  it("allocationNameIndex reads N of job.group[N]", () => {
    expect(allocationNameIndex("sbx.sandbox[0]")).toBe(0);
    expect(allocationNameIndex("my.job.with.dots.sandbox[12]")).toBe(12);
    expect(allocationNameIndex("weird")).toBe(-1);
    expect(allocationNameIndex(undefined)).toBe(-1);
  });

  it("running and terminal", () => {
    const running = alloc({ DesiredStatus: "run", ClientStatus: "running", TaskStates: { t: { State: "running" } } });
    expect(isAllocationRunning(running)).toBe(true);
    expect(isAllocationTerminal(running)).toBe(false);
    expect(isAllocationRunning(alloc({ DesiredStatus: "stop", ClientStatus: "running" }))).toBe(false);
    expect(isAllocationTerminal(alloc({ DesiredStatus: "stop", ClientStatus: "running" }))).toBe(true);
    expect(isAllocationTerminal(alloc({ DesiredStatus: "run", ClientStatus: "lost" }))).toBe(true);
  });

  it("running, named task: a poststop task pending while the server runs does not hide it", () => {
    const a = alloc({ DesiredStatus: "run", ClientStatus: "running", TaskStates: { "sandbox-server": { State: "running" }, "workspace-cleanup": { State: "pending" } } });
    expect(isAllocationRunning(a, "sandbox-server")).toBe(true);
    expect(isAllocationRunning(a)).toBe(false);
    const starting = alloc({ DesiredStatus: "run", ClientStatus: "running", TaskStates: { "sandbox-server": { State: "pending" }, other: { State: "running" } } });
    expect(isAllocationRunning(starting, "sandbox-server")).toBe(false);
    // A task that reports no state yet: every task decides.
    expect(isAllocationRunning(alloc({ DesiredStatus: "run", ClientStatus: "running", TaskStates: { t: { State: "running" } } }), "sandbox-server")).toBe(true);
  });

  it("latestTaskEvents orders by exact nanosecond time across tasks and names the message", () => {
    const a = alloc({
      TaskStates: {
        main: {
          State: "dead",
          Events: [
            { Type: "Received", Time: "1700000000000000001", DisplayMessage: "Task received by client" },
            { Type: "Driver Failure", Time: "1700000000000000003", DriverError: "Failed to pull `img:1`: manifest unknown", DisplayMessage: "Failed to pull `img:1`: manifest unknown" },
          ],
        },
        sidecar: { State: "dead", Events: [{ Type: "Terminated", Time: "1700000000000000002", ExitCode: 137, Signal: 9 }] },
      },
    });
    expect(latestTaskEvents(a, 10)).toEqual([
      "main: Received: Task received by client",
      "sidecar: Terminated: exit code 137, signal 9",
      "main: Driver Failure: Failed to pull `img:1`: manifest unknown",
    ]);
    expect(latestTaskEvents(a, 1)).toEqual(["main: Driver Failure: Failed to pull `img:1`: manifest unknown"]);
    expect(describeTaskEvent({ Type: "Started" })).toBe("Started");
  });
});

describe("retry and configuration", () => {
  it("backoff is capped exponential with full jitter", () => {
    const opts = { attempts: 5, baseMs: 100, maxMs: 1_000 };
    expect([1, 2, 3, 4, 5, 6].map((r) => backoffDelayMs(r, opts, () => 0.999999))).toEqual([99, 199, 399, 799, 999, 999]);
    expect(backoffDelayMs(3, opts, () => 0)).toBe(0);
  });

  it("sleep rejects at once when aborted", async () => {
    const ac = new AbortController();
    const started = Date.now();
    const pending = sleep(5_000, ac.signal);
    ac.abort(new Error("stop"));
    await expect(pending).rejects.toThrow("stop");
    // bound: at once, not after the 5 s sleep: 3 s leaves a loaded box's event loop room.
    expect(Date.now() - started).toBeLessThan(3_000);
  });

  it("NOMAD_* parse like the nomad CLI; empty values are unset", () => {
    expect(nomadOptionsFromEnv({ NOMAD_SKIP_VERIFY: "1", NOMAD_TOKEN: "", NOMAD_CACERT: "/ca.pem", NOMAD_CLIENT_CERT: "/c.pem", NOMAD_CLIENT_KEY: "/k.pem" })).toEqual({
      skipVerify: true,
      caCert: "/ca.pem",
      clientCert: "/c.pem",
      clientKey: "/k.pem",
    });
    expect(nomadOptionsFromEnv({ NOMAD_SKIP_VERIFY: "false" }).skipVerify).toBe(false);
    expect(nomadOptionsFromEnv({ NOMAD_ADDR: "http://a:1" }, { address: "http://b:2", token: undefined })).toEqual({ address: "http://b:2" });
  });
});
