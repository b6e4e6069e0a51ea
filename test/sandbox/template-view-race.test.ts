/**
 * Issue 39: the flaky `templates-pool › a template the server evicted (budget) is built
 * again` once found an empty workspace (`ls` gave '' instead of `a.bin`) after the rebuild.
 * Its cause was not the eviction (a view holds a reference on its template, so no build can
 * evict a template a slot is about to see, test/sandbox/templates.test.ts): it was the slot's
 * namespace, started by the warm timer of an earlier reset when it fired in the middle of
 * this one — after the old namespaces were stopped, before the new view was attached. That
 * namespace bound the workspace as it was then (empty, or the previous trajectory's disk)
 * and the slot's next calls ran in it.
 *
 * Here the warm fires at each step boundary of a reset on purpose (support/warm-mid-reset.ts,
 * in namespaces of its own, so views and disks are real mounts), whatever the timing a
 * loaded machine would give: the slot must see exactly the template's files after a reset
 * into it, and nothing after a plain reset — never an empty or partial view, never the last
 * trajectory's file.
 */
import { spawn } from "node:child_process";
import { chmod, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { findUnshare, OWN_MOUNT_NAMESPACE_ENV, ownNamespacePrefix } from "../../src/host/mount-namespace.js";
import { startServer, type TestServer } from "./helpers.js";

const SCRIPT = fileURLToPath(new URL("./support/warm-mid-reset.ts", import.meta.url));
const unshare = findUnshare();

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "view-race-"));
  await chmod(dir, 0o711); // slot uids traverse it to their workspaces
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

function runScript(): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const prefix = ownNamespacePrefix(unshare!);
  const child = spawn(prefix[0]!, [...prefix.slice(1), process.execPath, "--import", "tsx", SCRIPT, join(dir, "data")], {
    env: { ...process.env, [OWN_MOUNT_NAMESPACE_ENV]: "1" },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (d: Buffer) => (stdout += d.toString()));
  child.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
  return new Promise((resolve) => child.on("exit", (code) => resolve({ code, stdout, stderr })));
}

describe("a slot's namespace started in the middle of its reset", () => {
  it.skipIf(!unshare)("never sees an empty or partial template view nor the last trajectory's files, at any step of the reset — skipped without util-linux unshare", async () => {
    const r = await runScript();
    expect(r.code, r.stderr).toBe(0);
    const rounds = r.stdout.trim().split("\n").map((l) => JSON.parse(l) as { point: string; template: string | null; armedLeft: boolean; ls: string });
    expect(rounds).toHaveLength(6);
    // Every injection point was reached (the warm really fired mid-reset).
    expect(rounds.filter((x) => x.armedLeft)).toEqual(rounds.filter((x) => x.point === "attach" && x.template === null));
    for (const x of rounds) expect({ point: x.point, template: x.template, ls: x.ls.trim() }).toEqual({ point: x.point, template: x.template, ls: x.template === "a" ? "a.txt" : "" });
  }, 120_000);
});

describe("a template evicted while a reset into it arrives", () => {
  let s: TestServer;
  beforeAll(async () => {
    // 2 MB: one 1.5 MB build evicts every template no slot uses.
    s = await startServer({ slots: 1, extraArgs: ["--template-budget-mb", "2"] });
  }, 120_000);
  afterAll(async () => {
    await s?.stop();
  });

  it("the reset gets the whole template or a 404 naming it (the pool then builds it again), never an empty or partial view, whatever the build's timing", async () => {
    // 40 files and a marker written last: a partial view would miss some.
    const A = { name: "a", setup: ["for i in $(seq 1 40); do head -c 20000 /dev/urandom > f$i; done; sha256sum f* | sha256sum | cut -c1-16 > sum"] };
    const outcomes: string[] = [];
    for (let round = 0; round < 8; round++) {
      expect((await s.post("/templates", A)).json.success).toBe(true);
      // Back to a plain workspace: nothing refers to a, so the next build may evict it.
      expect((await s.post("/reset", { slot_id: "slot_0" })).json.success).toBe(true);
      const evictor = s.post("/templates", { name: `c${round}`, setup: [`head -c 1500000 /dev/urandom > c.bin`] });
      // The reset arrives before, during or after the evicting build (0 to ~110 ms in).
      await new Promise((r) => setTimeout(r, (round % 6) * 20));
      const reset = await s.post("/reset", { slot_id: "slot_0", template: "a" });
      expect((await evictor).json.success).toBe(true);
      if (reset.status === 404) {
        expect(reset.json.error).toMatch(/unknown template 'a': build it first with POST \/templates/);
        outcomes.push("404");
        continue;
      }
      expect(reset.json.success, reset.text).toBe(true);
      const check = await s.bash(0, "ls | wc -l; test \"$(sha256sum f* | sha256sum | cut -c1-16)\" = \"$(cat sum)\" && echo whole");
      expect(check.output.trim().split("\n")).toEqual(["41", "whole"]);
      outcomes.push("view");
    }
    // The reset issued with the build (round 0) always finds the template; later rounds see
    // either (on this machine, idle: about one in four a 404), each as asserted above.
    expect(outcomes[0]).toBe("view");
  }, 180_000);
});
