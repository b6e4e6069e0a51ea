/**
 * branching-repo: the repo-tasks repository, with branching groups (docs/fork.md).
 *
 * One trajectory per group explores the repository (reads the buggy file, runs the failing
 * test); then its slot is forked into the group's other slots — copy-on-write copies of the
 * workspace, in milliseconds — and each branch continues from the same conversation, trying
 * its own fix. The exploration is generated once per group instead of once per trajectory;
 * the JSONL line records the tree (the shared prefix once, each branch's segment) and the
 * report draws it. Rewards run in each branch's own slot.
 *
 * The oracle plays four different fixes, one per branch (an edit with write_file, `sed`, a
 * new file moved into place, and `sed` after reading the test), all correct, so it runs
 * 100 % solved without a model. Written against slotpool's public API only.
 */
import type { AgentEnvRuntime, BranchPoint, OracleScript } from "slotpool";
import RepoTasksEnv, { BUGS, MATH_SH, TEXT_SH, type RepoTask } from "../repo-tasks/env.js";

export default class BranchingRepoEnv extends RepoTasksEnv {
  static override envName = "branching-repo";

  constructor(config: Record<string, unknown> = {}, runtime: AgentEnvRuntime = {}) {
    super({ groupSize: 4, totalGroups: 4, ...config }, runtime);
  }

  /** Fork after the agent has explored: once it has run its first `bash` command (the failing test). */
  override branchPoint(_task: RepoTask): BranchPoint {
    return { afterTool: "bash" };
  }

  override oracle(task: RepoTask): OracleScript {
    const bug = BUGS[task.bug];
    const original = bug.file === "lib/math.sh" ? MATH_SH : TEXT_SH;
    const fixedText = original.replace(bug.broken, bug.fixed);
    const test = `bash tests/run.sh ${task.bug}`;
    // sed needs the broken line as a literal pattern.
    const sedEscape = (s: string) => s.replace(/[\\/.*[\]^$&]/g, (c) => `\\${c}`);
    const sed = `sed -i 's/${sedEscape(bug.broken).replace(/'/g, `'\\''`)}/${sedEscape(bug.fixed).replace(/'/g, `'\\''`)}/' ${bug.file}`;
    return ({ turn, branch }) => {
      // The shared exploration: read the file, run the failing test.
      if (turn === 1) return { toolCalls: [{ name: "read_file", arguments: { path: bug.file } }] };
      if (turn === 2) return { toolCalls: [{ name: "bash", arguments: { command: `${test}; echo "exit $?"` } }] };
      // Each branch its own way to the fix.
      if (turn === 3) {
        switch (branch ?? 0) {
          case 0:
            return { toolCalls: [{ name: "write_file", arguments: { path: bug.file, content: fixedText } }] };
          case 1:
            return { toolCalls: [{ name: "bash", arguments: { command: sed } }] };
          case 2:
            return {
              toolCalls: [
                { name: "write_file", arguments: { path: "fix.tmp", content: fixedText } },
                { name: "bash", arguments: { command: `mv fix.tmp ${bug.file} && git diff --stat` } },
              ],
            };
          default:
            return { toolCalls: [{ name: "bash", arguments: { command: `cat tests/test_${task.bug}.sh && ${sed}` } }] };
        }
      }
      if (turn === 4) return { toolCalls: [{ name: "bash", arguments: { command: `${test} && git diff --stat` } }] };
      return { final: `Fixed ${bug.file} (branch ${branch ?? 0}): ${bug.fixed}` };
    };
  }
}
