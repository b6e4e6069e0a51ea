/**
 * A test env: each item asks the agent to write a file with given content; the reward runs
 * `cat` in the trajectory's own slot and compares.
 */
import type { AgentResult } from "../../../src/agent/agent-loop.js";
import type { OracleScript } from "../../../src/agent/oracle-policy.js";
import { AgentEnv } from "../../../src/env/agent-env.js";
import type { ToolContext } from "../../../src/env/tool-context.js";

export interface FileItem {
  id: number;
  path: string;
  content: string;
}

export class WriteFileEnv extends AgentEnv<FileItem> {
  static override envName = "write-file-test";
  private next = 0;
  readonly setupCalls: string[] = [];
  readonly rewardOutputs: string[] = [];

  getNextItem(): FileItem {
    const id = this.next++;
    return { id, path: `out_${id}.txt`, content: `hello ${id}` };
  }

  buildTask(item: FileItem): string {
    return `TASK ${item.id}: create ${item.path} containing exactly '${item.content}'`;
  }

  override async setupWorkspace(item: FileItem, ctx: ToolContext): Promise<void> {
    const r = await ctx.terminal(`echo seeded > seed_${item.id}.txt`);
    this.setupCalls.push(`${ctx.trajectoryId}:${r.exitCode}`);
  }

  async computeReward(item: FileItem, _result: AgentResult, ctx: ToolContext): Promise<number> {
    const seed = await ctx.readFile(`seed_${item.id}.txt`);
    const r = await ctx.terminal(`cat ${item.path}`);
    this.rewardOutputs.push(r.output);
    return seed.ok && r.exitCode === 0 && r.output === item.content ? 1 : 0;
  }

  override oracle(item: FileItem): OracleScript {
    return ({ turn }) => (turn === 1 ? { toolCalls: [{ name: "bash", arguments: { command: `printf '%s' '${item.content}' > ${item.path}` } }] } : { final: "done" });
  }
}
