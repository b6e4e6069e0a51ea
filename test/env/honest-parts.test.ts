/**
 * The parts behind issue 21's CLI behaviour, each alone: the isolation summary from /health
 * answers (old, new and missing keys), ToolContext's typed errors against scripted executor
 * answers, the nearest known config key, and readable log lines that still redact secrets.
 */
import { Writable } from "node:stream";
import { z } from "zod";
import { describe, expect, it } from "vitest";
import type { ToolExecutorLike } from "../../src/executor/types.js";
import type { ToolResult } from "../../src/protocol/tool.js";
import type { HealthResponse } from "../../src/protocol/sandbox.js";
import { summarizeIsolation } from "../../src/env/isolation.js";
import { ToolContext } from "../../src/env/tool-context.js";
import { PathRefusedError, ToolContextError } from "../../src/env/errors.js";
import { SlotLostError } from "../../src/pool/errors.js";
import { nearestName, unknownConfigKeys, AgentEnvConfigSchema } from "../../src/env/config.js";
import { createLogger, formatPrettyLine } from "../../src/observability/logger.js";

const health = (over: Partial<HealthResponse> & Record<string, unknown>): HealthResponse => ({ status: "ok", slots: 4, bwrap_available: true, ...over }) as HealthResponse;
const limits = { per_slot_uids: true, memory: "cgroup", pids: "cgroup", cpu_weight: "cgroup", rlimits: [], disk: "workspace_and_tmp", disk_mb: 512, gaps: [] };

describe("isolation summary", () => {
  it("reads today's /health keys; says 'unknown' for keys an older server lacks, never a guess", () => {
    const s = summarizeIsolation([{ id: "a", url: "u", health: health({ limits, internet: "slirp4netns", seccomp: "filter", ptrace: true }) }, { id: "b", url: "u", health: health({}) }], { allowNetwork: true });
    expect(s.sandbox).toBe("sandboxed (bubblewrap, seccomp filter, ptrace on (1 of 2 containers); seccomp filter unknown (1 of 2 containers))");
    expect(s.memory).toBe("per-slot cgroup (1 of 2 containers); unknown (1 of 2 containers)");
    expect(s.disk).toBe("workspace and /tmp on a tmpfs of 512 MB (1 of 2 containers); unknown (1 of 2 containers)");
    expect(s.network).toBe("allowed (user-mode network, slirp4netns) (1 of 2 containers); unknown (1 of 2 containers)");
  });

  it("says in words when slots ran unsandboxed, and which containers did not answer", () => {
    const s = summarizeIsolation(
      [
        { id: "a", url: "u", health: health({ bwrap_available: false, sandbox_unavailable_reason: "bwrap: No permissions to create new namespace", limits: { ...limits, memory: "rlimit_as_per_process", pids: "rlimit_nproc_shared_uid", disk: "tmp_only" } }) },
        { id: "b", url: "u", error: "connect ECONNREFUSED" },
      ],
      { allowNetwork: false },
    );
    expect(s.sandbox).toBe("UNSANDBOXED: slots on 1 of 1 containers ran without bubblewrap, with the server's own view of the host (bwrap: No permissions to create new namespace)");
    expect(s.unanswered).toBe(1);
    expect(s.memory).toBe("RLIMIT_AS per process (no per-slot bound)");
    expect(s.pids).toBe("RLIMIT_NPROC shared by all slots");
    expect(s.disk).toBe("only /tmp bounded (512 MB each); the workspace is not");
    expect(s.network).toBe("off (executor.allowNetwork false: loopback only)");
    expect(summarizeIsolation([], { allowNetwork: false }).sandbox).toBe("unknown (no sandbox server answered /health)");
  });
});

/** An executor whose every call answers `answer`. */
function scripted(answer: Partial<ToolResult>, artifact: { success: boolean; error?: string } = { success: true }): ToolExecutorLike {
  const result: ToolResult = { success: true, output: "", error: "", metadata: {}, uniq_id: null, ...answer };
  const fail = async () => ({ ...artifact, content: "", encoding: "base64" as const, truncated: false, bytes: 0, file_size: 0, path: "p", mime: "", entries: [], format: "tar.gz" as const });
  return {
    start: async () => {},
    execute: async () => result,
    release: async () => {},
    readArtifact: fail,
    listArtifacts: fail,
    archiveArtifacts: fail,
    stats: () => ({}) as never,
    close: async () => {},
  } as unknown as ToolExecutorLike;
}

describe("ToolContext throws instead of answering success:false", () => {
  it("a refused path: PathRefusedError naming the rule (path_problem from the server, or an older server's words)", async () => {
    const refused = { success: false, error: 'path "/tmp/x" is outside the workspace: absolute paths must be under /workspace/', metadata: { exit_code: 1, path_problem: "outside" } };
    for (const answer of [refused, { ...refused, metadata: { exit_code: 1 } }]) {
      const ctx = new ToolContext("t1", scripted(answer));
      const err = await ctx.writeFile("/tmp/x", "y").catch((e: unknown) => e);
      expect(err).toBeInstanceOf(PathRefusedError);
      expect((err as Error).message).toMatch(/^writeFile "\/tmp\/x" refused: paths must be inside \/workspace \(/);
      expect((err as PathRefusedError).code).toBe("PATH_REFUSED");
      await expect(ctx.readFile("/tmp/x")).rejects.toBeInstanceOf(PathRefusedError);
    }
  });

  it("a missing file is a result for readFile, an error for downloadFile; other failures are ToolContextError", async () => {
    const missing = new ToolContext("t1", scripted({ success: false, error: 'path "a.txt" not found', metadata: { exit_code: 1, path_problem: "not_found" } }, { success: false, error: 'path "a.txt" not found' }));
    expect(await missing.readFile("a.txt")).toEqual({ ok: false, content: "", error: 'path "a.txt" not found' });
    await expect(missing.downloadFile("a.txt")).rejects.toBeInstanceOf(ToolContextError);
    const tooBig = new ToolContext("t1", scripted({ success: false, error: "file is larger than 10 MB", metadata: { exit_code: 1 } }));
    await expect(tooBig.readFile("a.txt")).rejects.toThrow(/readFile "a.txt" failed in trajectory t1's slot: file is larger than 10 MB/);
    await expect(tooBig.writeFile("a.txt", "x")).rejects.toBeInstanceOf(ToolContextError);
  });

  it("terminal: any exit code or a timeout is a result; a call that could not run throws", async () => {
    const exit2 = await new ToolContext("t1", scripted({ success: false, output: "", error: "boom", metadata: { exit_code: 2 } })).terminal("false");
    expect(exit2).toMatchObject({ exitCode: 2, success: false, timedOut: false });
    const timedOut = await new ToolContext("t1", scripted({ success: false, error: "timed out", metadata: { timeout: true } })).terminal("sleep 9");
    expect(timedOut.timedOut).toBe(true);
    await expect(new ToolContext("t1", scripted({ success: false, error: "unknown tool", metadata: {} })).terminal("x")).rejects.toBeInstanceOf(ToolContextError);
  });

  it("a lost slot: the executor's SlotLostError, passed on as it is from every method (artifacts included), so the trajectory is restarted", async () => {
    const err = new SlotLostError("slot_0", "a1", "killed", "t1");
    const gone = async () => {
      throw err;
    };
    const executor = { ...scripted({}), execute: gone, readArtifact: gone, listArtifacts: gone, archiveArtifacts: gone } as ToolExecutorLike;
    const lost = new ToolContext("t1", executor);
    for (const call of [() => lost.terminal("ls"), () => lost.readFile("a"), () => lost.writeFile("a", "b"), () => lost.downloadFile("a"), () => lost.listFiles("."), () => lost.archive("."), () => lost.callTool("bash", { command: "ls" })]) {
      await expect(call()).rejects.toBe(err);
    }
  });
});

describe("strict config", () => {
  it("names each unknown key with the nearest known one", () => {
    expect(unknownConfigKeys(AgentEnvConfigSchema, { groupSzie: 2, maxTurns: 3, totallyUnrelatedKey: 1 })).toEqual([
      "unknown key 'groupSzie' (did you mean 'groupSize'?)",
      "unknown key 'totallyUnrelatedKey'",
    ]);
    expect(nearestName("modelname", ["modelName", "modelUrl"])).toBe("modelName");
    // An env's own settings (AgentEnvConfigSchema.extend) are known keys too, and checked the same way.
    const Extended = AgentEnvConfigSchema.extend({ difficulty: z.number().default(1) });
    expect(unknownConfigKeys(Extended, { difficulty: 2, difficutly: 3 })).toEqual(["unknown key 'difficutly' (did you mean 'difficulty'?)"]);
  });
});

describe("readable log lines", () => {
  it("one short line per entry: time, level, message, fields; secrets still redacted", () => {
    let out = "";
    const sink = new Writable({ write: (c: Buffer, _e, cb) => ((out += c.toString()), cb()) });
    const log = createLogger({ name: "t", level: "info", format: "pretty", destination: sink });
    log.warn({ trajectoryId: "abc", token: "s3cret-token", err: "a b" }, "the reward failed");
    expect(out).toMatch(/^\d\d:\d\d:\d\d WARN {2}the reward failed {2}trajectoryId=abc token=\[redacted\] err="a b"\n$/);
    expect(out).not.toContain("s3cret");
    expect(formatPrettyLine("not json")).toBe("not json\n");
  });
});
