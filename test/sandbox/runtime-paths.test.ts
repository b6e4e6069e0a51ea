import { chmodSync, copyFileSync, existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { blockedForOthers } from "../../src/host/reachable.js";
import { SandboxStartError, startSandboxProcess } from "../../src/pool/sandbox-process.js";
import { serversMayMount } from "../support/server-view.js";
import { isRoot, startServer } from "./helpers.js";

/**
 * Runtime files the slots must reach (issue 10): a root server runs slot i as uid 20000+i,
 * and those uids must walk down to the spawner, the data dir and the state files wherever
 * the checkout is. A clone under a private dir (/root is 0700, so is any `mktemp -d`) used
 * to give "bwrap: Can't find source path …: Permission denied" on every call, or a silent
 * fall back to unsandboxed commands. Now: the spawner is copied where slot uids reach it,
 * and a data dir they cannot reach stops the server at start with one error naming the
 * directory and the fix. As non-root, slots run as the server's own uid: both cases work.
 */
const UID_BASE = 21400;
const privateDir = mkdtempSync(join(tmpdir(), "slotpool-private-")); // 0700, like /root
afterAll(() => rmSync(privateDir, { recursive: true, force: true }));

describe("blockedForOthers", () => {
  it("names the first directory on the way that others cannot search", () => {
    const deep = join(privateDir, "a", "b");
    mkdirSync(deep, { recursive: true, mode: 0o755 });
    expect(blockedForOthers(deep)).toEqual({ dir: privateDir, mode: 0o700 });
    expect(blockedForOthers("/usr/bin")).toBeUndefined();
  });
});

describe("a data dir the slot uids cannot reach", () => {
  it(isRoot ? "stops a root server at start with one error naming the directory and the fix" : "is fine without root: slots run as the server's uid", async () => {
    const dataDir = join(privateDir, "data");
    const started = startSandboxProcess({ slots: 1, dataDir, extraArgs: ["--slot-uid-base", String(UID_BASE)], startTimeoutMs: 60_000 });
    if (isRoot) {
      const err = await started.then(
        async (p) => {
          await p.stop();
          return new Error("the server started");
        },
        (e: unknown) => e,
      );
      expect(err).toBeInstanceOf(SandboxStartError);
      const message = (err as Error).message;
      expect(message).toContain(`the data dir ${dataDir} is out of reach of the slot uids: ${privateDir} is mode 0700`);
      expect(message).toContain(`chmod o+x ${privateDir}`);
      expect(message).toContain("--data-dir");
      // One error, not a fall back to unsandboxed commands.
      expect(message).not.toContain(`"msg":"listening"`);
    } else {
      const p = await started;
      try {
        const r = await fetch(`${p.url}/execute`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({ slot_id: "slot_0", tool: "bash", args: { command: "echo hi" } }),
        }).then((res) => res.json() as Promise<{ output: string; metadata: { sandboxed: boolean } }>);
        expect(r.output).toBe("hi");
        expect(r.metadata.sandboxed).toBe(true);
      } finally {
        await p.stop();
      }
    }
  });
});

describe("a spawner binary under a private directory", () => {
  it("still runs every slot on the fast path, sandboxed, as its own uid", async () => {
    // The built spawner, copied where a private checkout would have it.
    const nativeDir = join(dirname(new URL(import.meta.url).pathname), "..", "..", "dist", "src", "sandbox", "native");
    const built = existsSync(nativeDir) ? readdirSync(nativeDir).find((f) => /^slotpool-spawner(-[0-9a-f]+)?$/.test(f)) : undefined;
    const hidden = join(privateDir, "checkout", "slotpool-spawner");
    mkdirSync(dirname(hidden), { recursive: true });
    if (built) copyFileSync(join(nativeDir, built), hidden);
    else {
      // Not built yet in this checkout: a server builds it at start.
      const s = await startServer({ slots: 1 });
      await s.stop();
      const again = readdirSync(nativeDir).find((f) => /^slotpool-spawner-[0-9a-f]+$/.test(f));
      copyFileSync(join(nativeDir, again!), hidden);
    }
    chmodSync(hidden, 0o755);
    const s = await startServer({ slots: 2, extraArgs: ["--slot-uid-base", String(UID_BASE + 10)], env: { SLOTPOOL_SPAWNER: hidden } });
    try {
      const health = await s.get("/health");
      expect(health.json).toMatchObject({ bwrap_available: true, fast_path: true });
      for (const slot of [0, 1]) {
        const r = await s.bash(slot, "id -u");
        expect(r.metadata.sandboxed).toBe(true);
        expect(r.success).toBe(true);
        if (isRoot) expect(Number(r.output)).toBe(UID_BASE + 10 + slot);
        else expect(Number(r.output)).toBe(process.getuid!());
      }
    } finally {
      await s.stop();
    }
  });
});

describe("the bounds in force", () => {
  it("are stated in the start-up line and /health alike, for this mode", async () => {
    const s = await startServer({ slots: 1, extraArgs: ["--slot-uid-base", String(UID_BASE + 20)] });
    try {
      const listening = s.logs.map((l) => JSON.parse(l) as { msg?: string; limits?: unknown }).find((l) => l.msg === "listening");
      const health = (await s.get("/health")).json;
      expect(listening?.limits).toEqual(health.limits);
      expect(health.limits.per_slot_uids).toBe(isRoot);
      // As root the workspace is bounded too (by default); not root, only /tmp and /var/tmp
      // are, and the gaps say so.
      expect(health.limits.disk).toBe(serversMayMount ? "workspace_and_tmp" : "tmp_only");
      expect(health.limits.gaps.some((g: string) => g.startsWith("a slot's workspace disk use"))).toBe(!serversMayMount);
      if (!isRoot) expect(health.limits.pids).toBe("rlimit_nproc_shared_uid");
    } finally {
      await s.stop();
    }
  });
});
