import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import pino from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Slot } from "../../src/sandbox/core/slot.js";
import { SlotBootIds } from "../../src/sandbox/isolation/boot-id.js";
import { SlotNetworks } from "../../src/sandbox/isolation/slot-netns.js";
import { ProcessSessions } from "../../src/sandbox/tools/process-sessions.js";
import type { SlotHost } from "../../src/sandbox/workspace/slot-host.js";

/**
 * A fork's re-warming is off its path (issue 30): a slot that runs process sessions (an E2B
 * sandbox) keeps one sandbox started ahead; a fork kills it (its mounts change) and starts
 * one again only after the fork has answered, and not at all when another fork of the slot
 * comes first. Before, the fork started it again before answering (a spawn, milliseconds of
 * blocked event loop per slot), and a fork right after killed it unused.
 *
 * ProcessSessions with a stand-in for bubblewrap (a script counting its starts, then
 * sleeping): what is checked is when sandboxes are started, not what runs in them.
 */
let dir: string;
let starts: string;
let sessions: ProcessSessions;
let slot: Slot;

const launches = (): number => readFileSync(starts, "utf8").length;

async function until(what: string, ok: () => boolean, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!ok()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for: ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "slotpool-rewarm-"));
  starts = join(dir, "starts");
  writeFileSync(starts, "");
  const fakeBwrap = join(dir, "bwrap");
  writeFileSync(fakeBwrap, `#!/bin/sh\nprintf x >> '${starts}'\nexec sleep 60\n`);
  chmodSync(fakeBwrap, 0o755);
  slot = new Slot(0, join(dir, "ws"), undefined);
  const host = {
    slots: [slot],
    limits: { maxProcesses: 64, maxFileBytes: 1 << 20, cpuSeconds: 10 },
    bwrap: { available: true, path: fakeBwrap, filter: null },
    logger: pino({ level: "silent" }),
    cgroups: { place: () => undefined },
    stateDir: dir,
    addressSpaceBytes: 0,
    internetAccess: undefined,
    disks: { writableArgs: () => [] },
    effectiveNetwork: () => false,
    identity: () => undefined,
    // The service's own (issue 36 moved it there from ProcessSessions): the slots' shared network namespaces.
    slotNetworks: new SlotNetworks(),
    // A plain slot: no image root (task images, issue 36).
    imageRoots: { rootFor: () => undefined },
    // Each slot's boot id file (e2b-snapshots), bound into its sandboxes.
    bootIds: new SlotBootIds(dir),
  } as unknown as SlotHost;
  sessions = new ProcessSessions(host);
  // The slot runs a session: from then on it keeps a sandbox started ahead.
  await sessions.startWhenSettled(slot, { cmd: "/bin/true", args: [], envs: {}, stdin: false });
  await until("the slot's sandbox started ahead", () => sessions.hasWarm(slot));
});

afterAll(async () => {
  await sessions?.close();
  rmSync(dir, { recursive: true, force: true });
});

describe("a fork's re-warm of its slots' process-session sandboxes", () => {
  it("happens after the fork has answered, not before", async () => {
    let duringFork: boolean | undefined;
    await sessions.whileStopped(slot, [], async () => {
      duringFork = sessions.hasWarm(slot);
    });
    expect(duringFork).toBe(false);
    // Answered: nothing started yet on the fork's path...
    expect(sessions.hasWarm(slot)).toBe(false);
    // ...and a moment later the slot has one again.
    await until("the slot's sandbox started ahead again", () => sessions.hasWarm(slot));
  });

  it("a fork right after a fork finds nothing to kill; the slot is warmed once, after the last", async () => {
    await until("warm", () => sessions.hasWarm(slot));
    const before = launches();
    await sessions.whileStopped(slot, [], async () => undefined);
    await sessions.whileStopped(slot, [], async () => undefined);
    await until("the slot's sandbox started ahead again", () => sessions.hasWarm(slot));
    // wait: a second start-up, if any, would follow within the rewarm delay; this window lets it show (a loaded box can only hide one: never a false failure).
    await new Promise((r) => setTimeout(r, 300));
    expect(launches() - before).toBe(1);
  });
});
