/**
 * repo-tasks: repository tasks on a shared workspace template (the shape of SWE-style envs).
 *
 * Every item works on the same repository: `shkit`, a small shell project — a library
 * (lib/*.sh) with four bugs, a test suite (tests/), and a vendored tree of several thousand
 * files standing in for installed dependencies — committed to git. The repository is built
 * once per container as a workspace template (`workspaceTemplate`); each trajectory's slot
 * is reset into a copy-on-write view of it, so a trajectory starts on a full checkout in
 * milliseconds instead of cloning and installing it. Each item asks to fix one bug;
 * `computeReward` runs that bug's test in the slot and checks the tests were not edited.
 *
 * It ships an oracle policy (the fix, as a tool call), so it runs without a model.
 * Written against slotpool's public API only.
 */
import { AgentEnv, type AgentEnvRuntime, type AgentResult, type OracleScript, type TemplateSpec, type ToolContext } from "slotpool";

export interface RepoTask {
  id: number;
  bug: BugName;
}

export type BugName = "sum" | "max" | "clamp" | "repeat";

export interface Bug {
  /** What the issue report says. */
  report: string;
  /** The buggy line in lib/math.sh or lib/text.sh, and its fix. */
  file: string;
  broken: string;
  fixed: string;
}

export const BUGS: Record<BugName, Bug> = {
  sum: { report: "`sum 2 3 4` prints -9 instead of 9.", file: "lib/math.sh", broken: "total=$((total - n))", fixed: "total=$((total + n))" },
  max: { report: "`max 3 9 4` prints 3 instead of 9.", file: "lib/math.sh", broken: 'if [ "$n" -lt "$best" ]; then best=$n; fi', fixed: 'if [ "$n" -gt "$best" ]; then best=$n; fi' },
  clamp: { report: "`clamp 15 0 10` prints 11 instead of 10 (values above the upper bound are off by one).", file: "lib/math.sh", broken: 'if [ "$v" -gt "$hi" ]; then v=$((hi + 1)); fi', fixed: 'if [ "$v" -gt "$hi" ]; then v=$hi; fi' },
  repeat: { report: "`repeat ab 3` prints `abab` instead of `ababab`.", file: "lib/text.sh", broken: 'for ((i = 1; i < count; i++)); do out+=$s; done', fixed: 'for ((i = 0; i < count; i++)); do out+=$s; done' },
};
export const BUG_NAMES = Object.keys(BUGS) as BugName[];

export const MATH_SH = `# shkit math helpers.
sum() {
  local total=0 n
  for n in "$@"; do
    ${BUGS.sum.broken}
  done
  echo "$total"
}

max() {
  local best=$1 n
  shift
  for n in "$@"; do
    ${BUGS.max.broken}
  done
  echo "$best"
}

clamp() {
  local v=$1 lo=$2 hi=$3
  if [ "$v" -lt "$lo" ]; then v=$lo; fi
  ${BUGS.clamp.broken}
  echo "$v"
}
`;

export const TEXT_SH = `# shkit text helpers.
repeat() {
  local s=$1 count=$2 out="" i
  ${BUGS.repeat.broken}
  echo "$out"
}

upper() {
  echo "\${1^^}"
}
`;

const TESTS: Record<BugName, string> = {
  sum: `expect "$(sum 2 3 4)" 9\nexpect "$(sum)" 0\nexpect "$(sum 10 -5 7)" 12\n`,
  max: `expect "$(max 3 9 4)" 9\nexpect "$(max -4 -2 -9)" -2\nexpect "$(max 5)" 5\n`,
  clamp: `expect "$(clamp 15 0 10)" 10\nexpect "$(clamp -3 0 10)" 0\nexpect "$(clamp 7 0 10)" 7\n`,
  repeat: `expect "$(repeat ab 3)" ababab\nexpect "$(repeat x 1)" x\nexpect "$(repeat x 0)" ""\n`,
};

const RUN_SH = `#!/bin/bash
# Runs one test file (tests/test_NAME.sh) or all of them; exit 0 when every check passes.
cd "$(dirname "$0")/.." || exit 2
source lib/math.sh
source lib/text.sh
for f in vendor/*/index.sh; do source "$f"; done
failed=0
expect() { if [ "$1" != "$2" ]; then echo "FAIL: got '$1', expected '$2'"; failed=1; fi; }
for t in \${1:+tests/test_$1.sh}; do source "$t"; done
[ -z "$1" ] && for t in tests/test_*.sh; do source "$t"; done
[ "$failed" = 0 ] && echo PASS
exit "$failed"
`;

/** Vendored packages: VENDOR_DIRS directories of VENDOR_FILES files each (the bulk of the checkout). */
export const VENDOR_DIRS = 40;
export const VENDOR_FILES = 100;

/** The repository as a workspace template: files written first, then the setup commands. */
export const SHKIT_TEMPLATE: TemplateSpec = {
  name: "shkit",
  files: {
    "README.md": "# shkit\n\nSmall shell helpers. Run the tests with `bash tests/run.sh` (or `bash tests/run.sh NAME`).\n",
    "lib/math.sh": MATH_SH,
    "lib/text.sh": TEXT_SH,
    "tests/run.sh": RUN_SH,
    ...Object.fromEntries(BUG_NAMES.map((b) => [`tests/test_${b}.sh`, TESTS[b]])),
  },
  setup: [
    // The "installed dependencies": many small files in a vendored tree.
    `for d in $(seq -w 1 ${VENDOR_DIRS}); do mkdir -p vendor/pkg$d; printf '# pkg%s\\npkg%s_version() { echo 1.$d; }\\n' $d $d > vendor/pkg$d/index.sh; ` +
      `for f in $(seq -w 1 ${VENDOR_FILES - 1}); do printf '# pkg%s module %s\\nm_%s_%s() { echo %s; }\\n' $d $f $d $f $f > vendor/pkg$d/mod$f.sh; done; done`,
    "chmod +x tests/run.sh && git init -q . && git add -A && git -c user.email=shkit@example.invalid -c user.name=shkit commit -qm 'shkit 1.0' && git log --oneline | head -1",
  ],
  timeoutS: 300,
};

export default class RepoTasksEnv extends AgentEnv<RepoTask> {
  static override envName = "repo-tasks";
  private next = 0;

  constructor(config: Record<string, unknown> = {}, runtime: AgentEnvRuntime = {}) {
    super(
      {
        groupSize: 4,
        totalGroups: 8,
        maxTurns: 12,
        tools: { enabled: ["default"] },
        systemPrompt:
          "You are working in a git repository (the current directory). Use the tools to read code and run commands; fix the bug without editing the tests. When done, reply with a short summary and no tool call.",
        ...config,
      },
      runtime,
    );
  }

  getNextItem(): RepoTask {
    const id = this.next++;
    return { id, bug: BUG_NAMES[id % BUG_NAMES.length]! };
  }

  override async getEvalItems(): Promise<RepoTask[]> {
    return BUG_NAMES.map((bug, i) => ({ id: 1000 + i, bug }));
  }

  /** Every item works on the same repository: one template, built once per container. */
  override workspaceTemplate(): TemplateSpec {
    return SHKIT_TEMPLATE;
  }

  buildTask(task: RepoTask): string {
    return `Bug report for shkit: ${BUGS[task.bug].report} Find and fix the bug. The test \`bash tests/run.sh ${task.bug}\` must pass; do not edit tests/.`;
  }

  async computeReward(task: RepoTask, _result: AgentResult, ctx: ToolContext): Promise<number> {
    // The item's test, in the slot, and the tests untouched (git knows the template's state).
    const r = await ctx.terminal(`bash tests/run.sh ${task.bug} && git diff --quiet HEAD -- tests && echo REWARD-OK`, { timeout: 60 });
    return r.output.includes("REWARD-OK") ? 1 : 0;
  }

  /** The fix as one edit, then the test run an agent would do. */
  override oracle(task: RepoTask): OracleScript {
    const bug = BUGS[task.bug];
    return ({ turn }) => {
      if (turn === 1) return { toolCalls: [{ name: "read_file", arguments: { path: bug.file } }] };
      if (turn === 2) {
        const original = bug.file === "lib/math.sh" ? MATH_SH : TEXT_SH;
        return {
          toolCalls: [
            { name: "write_file", arguments: { path: bug.file, content: original.replace(bug.broken, bug.fixed) } },
            { name: "bash", arguments: { command: `bash tests/run.sh ${task.bug} && git diff --stat` } },
          ],
        };
      }
      return { final: `Fixed ${bug.file}: ${bug.fixed}` };
    };
  }
}
