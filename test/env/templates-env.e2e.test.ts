/**
 * AgentEnv.workspaceTemplate end to end (issue 13): env → executor → pool → real sandbox
 * servers. The trajectory's slot is reset into the item's template before setupWorkspace;
 * a group of 16 builds the template once; the run statistics carry the setup time.
 */
import { chmod, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { AgentResult } from "../../src/agent/agent-loop.js";
import type { OracleScript } from "../../src/agent/oracle-policy.js";
import { AgentEnv } from "../../src/env/agent-env.js";
import type { ToolBackend } from "../../src/env/backend.js";
import { formatSummary } from "../../src/env/run-modes/summary.js";
import { RunStats } from "../../src/env/run-stats.js";
import type { ToolContext } from "../../src/env/tool-context.js";
import { ToolExecutor } from "../../src/executor/tool-executor.js";
import { silentLogger } from "../../src/observability/logger.js";
import { LocalProvisioner } from "../../src/pool/local-provisioner.js";
import { SlotPool } from "../../src/pool/slot-pool.js";
import type { TemplateSpec } from "../../src/pool/template-affinity.js";
import { ToolRegistry } from "../../src/tools/registry.js";

const TEMPLATE: TemplateSpec = {
  name: "counter-repo",
  files: { "count.sh": "#!/bin/bash\necho $(( $1 - 1 ))\n" },
  setup: ["chmod +x count.sh && git init -q . && git add -A && git -c user.email=t@example.invalid -c user.name=t commit -qm init"],
};

/** Fix count.sh (it subtracts instead of adding 1); setupWorkspace proves the template is there first. */
class CounterEnv extends AgentEnv<{ id: number }> {
  readonly seenAtSetup: string[] = [];
  getNextItem() {
    return { id: 1 };
  }
  buildTask() {
    return "count.sh N should print N + 1. Fix it.";
  }
  override workspaceTemplate(): TemplateSpec {
    return TEMPLATE;
  }
  override async setupWorkspace(_item: { id: number }, ctx: ToolContext): Promise<void> {
    const r = await ctx.terminal("git log --oneline | wc -l; ./count.sh 5");
    this.seenAtSetup.push(r.output.trim());
  }
  override oracle(): OracleScript {
    return ({ turn }) =>
      turn === 1 ? { toolCalls: [{ name: "bash", arguments: { command: "sed -i 's/- 1/+ 1/' count.sh" } }] } : { final: "fixed" };
  }
  async computeReward(_item: { id: number }, _r: AgentResult, ctx: ToolContext): Promise<number> {
    const r = await ctx.terminal("./count.sh 5; git diff --stat | wc -l");
    return r.output.trim() === "6\n2" ? 1 : 0;
  }
}

let baseDir: string;
let pool: SlotPool;
let backend: ToolBackend;

beforeAll(async () => {
  baseDir = await mkdtemp(join(tmpdir(), "slotpool-tplenv-"));
  await chmod(baseDir, 0o711);
  pool = new SlotPool({ provisioner: new LocalProvisioner({ slotsPerContainer: 16, baseDir }), slotsPerContainer: 16, minContainers: 1, maxContainers: 1 });
  await pool.start();
  const executor = new ToolExecutor({ pool, tools: ToolRegistry.withBuiltins() });
  await executor.start();
  backend = {
    executor,
    registry: executor.tools,
    async close() {
      await executor.close();
      await pool.stop({ purge: true });
    },
  };
}, 60_000);

afterAll(async () => {
  await backend?.close();
  await rm(baseDir, { recursive: true, force: true });
});

describe("AgentEnv.workspaceTemplate", () => {
  it("resets each trajectory's slot into the template before setupWorkspace; a group of 16 builds it once", async () => {
    const env = new CounterEnv({ groupSize: 16, maxTurns: 3 }, { backend, logger: silentLogger() });
    await env.start();
    const outcome = await env.collectTrajectories(env.getNextItem());
    await env.close();
    expect(outcome.ok).toBe(true);
    if (!outcome.ok) return;
    expect(outcome.group.scores).toEqual(Array(16).fill(1));
    expect(env.seenAtSetup).toEqual(Array(16).fill("1\n4"));
    expect(pool.templates.builds).toBe(1);

    const stats = new RunStats();
    stats.addGroup(outcome);
    expect(stats.workspaceSetupMs).toHaveLength(16);
    expect(formatSummary("run", stats)).toMatch(/workspace setup p50\/p99\s+\d+(\.\d+)? (ms|s) \/ \d+(\.\d+)? (ms|s)/);
  }, 120_000);
});
