/**
 * /health says what `allow_network: true` gets: the internet through slirp4netns, or
 * "unavailable" with the reason. The missing-device case is the one a Nomad docker task hits
 * when it is not given /dev/net/tun: here the server runs in a mount namespace of the test's
 * own where /dev/net is an empty tmpfs (mounting it needs root).
 */
import { spawn, type ChildProcess } from "node:child_process";
import { chmodSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { slotpoolCommand } from "../../src/pool/slotpool-command.js";
import { isRoot, startServer } from "./helpers.js";

const UID_BASE = 20_000 + 3_700;

describe("/health names the network a slot gets", () => {
  it("internet: slirp4netns where slirp4netns, unshare, ip and /dev/net/tun are all here", async () => {
    const s = await startServer({ slots: 1, extraArgs: ["--slot-uid-base", String(UID_BASE)] });
    try {
      const health = (await s.get("/health")).json;
      expect(health).toMatchObject({ internet: "slirp4netns" });
      expect(health).not.toHaveProperty("internet_unavailable_reason");
    } finally {
      await s.stop();
    }
  });

  describe.runIf(isRoot)("without /dev/net/tun (a container not given the device)", () => {
    const dataDir = mkdtempSync(join(tmpdir(), "slotpool-notun-"));
    chmodSync(dataDir, 0o755);
    let child: ChildProcess | undefined;
    afterAll(async () => {
      if (child && child.exitCode === null) {
        const exited = new Promise((r) => child!.once("exit", r));
        child.kill("SIGTERM");
        await exited;
      }
      rmSync(dataDir, { recursive: true, force: true });
    });

    it("says unavailable and names /dev/net/tun; a call asking for network runs loopback-only", async () => {
      const { command, args } = slotpoolCommand();
      const server = [command, ...args, "sandbox-server", "--port", "0", "--slots", "1", "--data-dir", dataDir, "--slot-uid-base", String(UID_BASE + 10)];
      child = spawn("unshare", ["--mount", "--propagation", "private", "--", "/bin/sh", "-c", 'mount -t tmpfs notun /dev/net && exec "$@"', "sh", ...server], {
        stdio: ["ignore", "ignore", "pipe"],
      });
      const url = await new Promise<string>((resolve, reject) => {
        let buffered = "";
        child!.stderr!.setEncoding("utf8");
        child!.stderr!.on("data", (s: string) => {
          buffered += s;
          const m = /"msg":"listening".*?"url":"([^"]+)"|"url":"([^"]+)".*?"msg":"listening"/.exec(buffered);
          if (m) resolve((m[1] ?? m[2])!);
        });
        child!.once("exit", (code) => reject(new Error(`server exited (${code}) before listening:\n${buffered}`)));
      });
      const health = (await (await fetch(`${url}/health`)).json()) as Record<string, unknown>;
      expect(health["internet"]).toBe("unavailable");
      expect(health["internet_unavailable_reason"]).toMatch(/\/dev\/net\/tun is missing/);
      const res = await fetch(`${url}/execute`, {
        method: "POST",
        body: JSON.stringify({ slot_id: "slot_0", tool: "bash", args: { command: "cat /proc/net/dev | tail -n +3 | cut -d: -f1 | tr -d ' '", allow_network: true } }),
      });
      const r = (await res.json()) as { success: boolean; output: string; metadata: { network_isolated: boolean; network_unavailable?: string } };
      expect(r).toMatchObject({ success: true, output: "lo", metadata: { network_isolated: true } });
      // The result says why it got no network.
      expect(r.metadata.network_unavailable).toMatch(/\/dev\/net\/tun is missing/);
    });
  });
});
