/**
 * The executor service (`slotpool executor-server`, local provisioner) restarted while
 * trajectories run: every client gets an answer or a clear error within a bound, the old
 * service's sandbox servers are gone, and the new one starts with no slot held.
 */
import { chmodSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startCliServer, type CliServer } from "../security/support.js";
import { eventually, processesWithMarker, within } from "./support.js";

const TOKEN = "executor-restart-token-9e0a";
let base: string;
const servers: CliServer[] = [];

beforeAll(() => {
  base = mkdtempSync(join(tmpdir(), "slotpool-faults-exec-"));
  chmodSync(base, 0o755);
});
afterAll(async () => {
  for (const s of servers) await s.stop().catch(() => undefined);
  // Whatever a failed test left behind: stop it by its data dir, never by name.
  for (const p of processesWithMarker(base)) {
    try {
      process.kill(p.pid, "SIGKILL");
    } catch {
      /* gone */
    }
  }
  rmSync(base, { recursive: true, force: true });
});

async function startExecutor(dataDir: string): Promise<CliServer> {
  const s = await startCliServer(
    ["executor-server", "--port", "0", "--token", TOKEN, "--provisioner", "local", "--slots-per-container", "4", "--min-containers", "1", "--max-containers", "2", "--data-dir", dataDir, "--default-timeout", "30"],
    { startTimeoutMs: 60_000 },
  );
  servers.push(s);
  return s;
}

type Outcome = { kind: "answer"; status: number; body: any } | { kind: "error"; message: string };

async function call(url: string, trajectoryId: string, command: string): Promise<Outcome> {
  try {
    const res = await fetch(`${url}/execute`, {
      method: "POST",
      headers: { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" },
      body: JSON.stringify({ trajectory_id: trajectoryId, tool: { name: "bash", arguments: { command } }, timeout_s: 20 }),
      signal: AbortSignal.timeout(25_000),
    });
    return { kind: "answer", status: res.status, body: await res.json() };
  } catch (err) {
    return { kind: "error", message: `${(err as Error).message}: ${String((err as { cause?: Error }).cause?.message ?? "")}` };
  }
}

async function status(url: string): Promise<any> {
  const res = await fetch(`${url}/status`, { headers: { authorization: `Bearer ${TOKEN}` } });
  return res.json();
}

describe("executor service restarted while trajectories run", () => {
  it("SIGTERM: in-flight calls end with a clear answer or error; its sandbox servers exit; the new service holds no slot", async () => {
    const dataDir = join(base, "graceful");
    const first = await startExecutor(dataDir);
    const warm = await call(first.url, "warm", "true");
    expect(warm.kind === "answer" && warm.status).toBe(200);
    expect(processesWithMarker(dataDir).length).toBeGreaterThan(0);
    const inFlight = ["a", "b", "c", "d"].map((t) => call(first.url, t, "sleep 10; echo finished"));
    // wait: the calls reaching their slots (the service shows no event); dispatched or not, each must end with a clear answer or error
    await new Promise((r) => setTimeout(r, 1_000));
    const t0 = Date.now();
    await first.stop(15_000);
    const outcomes = await within(20_000, "in-flight calls after SIGTERM", Promise.all(inFlight));
    console.log(`executor stopped in ${Date.now() - t0} ms; in-flight outcomes:`, JSON.stringify(outcomes).slice(0, 600));
    for (const o of outcomes) {
      if (o.kind === "answer") {
        // An answer during shutdown must say what happened, not pretend success.
        expect(o.body.success).toBe(false);
        expect(String(o.body.error ?? "")).toMatch(/shut|clos|releas|killed|reset|stopp/i);
      } else expect(o.message).toMatch(/fetch failed|other side closed|ECONNRESET|socket/i);
    }
    expect(await eventually(() => processesWithMarker(dataDir).length === 0, 10_000), JSON.stringify(processesWithMarker(dataDir))).toBe(true);

    const second = await startExecutor(dataDir);
    const st = await status(second.url);
    expect(st.pool.slots.held).toBe(0);
    const again = await call(second.url, "a", "echo again");
    expect(again.kind === "answer" && again.body.output).toBe("again");
    await second.stop(15_000);
    expect(await eventually(() => processesWithMarker(dataDir).length === 0, 10_000)).toBe(true);
  }, 90_000);

  it("SIGKILL (a crash): clients get a connection error at once, and its sandbox servers do not outlive it", async () => {
    const dataDir = join(base, "crash");
    const first = await startExecutor(dataDir);
    const warm = await call(first.url, "warm", "true");
    expect(warm.kind === "answer" && warm.status).toBe(200);
    const servers = processesWithMarker(dataDir).filter((p) => p.cmdline.includes("sandbox-server"));
    expect(servers.length).toBeGreaterThan(0);
    const inFlight = ["a", "b"].map((t) => call(first.url, t, "sleep 10; echo finished"));
    // wait: as above
    await new Promise((r) => setTimeout(r, 1_000));
    first.child.kill("SIGKILL");
    const outcomes = await within(10_000, "in-flight calls after SIGKILL", Promise.all(inFlight));
    for (const o of outcomes) expect(o.kind).toBe("error");
    const orphansGone = await eventually(() => processesWithMarker(dataDir).length === 0, 15_000);
    const orphans = processesWithMarker(dataDir);
    console.log(`sandbox servers left running 15 s after the executor was SIGKILLed: ${orphans.length}`);
    expect(orphansGone, `orphaned sandbox servers: ${JSON.stringify(orphans.map((o) => o.cmdline.slice(0, 120)))}`).toBe(true);
  }, 60_000);
});
