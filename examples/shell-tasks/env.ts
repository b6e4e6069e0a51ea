/**
 * shell-tasks: an env of real shell tasks, each verified inside the trajectory's own slot.
 *
 * - create-file:   create a file with given content
 * - fix-script:    a broken script must be fixed so that it computes a sum (checked with hidden inputs)
 * - count-files:   count the files of one kind in a generated tree, write the number
 * - find-text:     find the file that holds a marker, write its path
 *
 * It ships an oracle policy (correct tool calls, reading tool results where it must), so it
 * runs without a model; `--model-url URL --model NAME` runs it against a model instead.
 * Written against slotpool's public API only.
 */
import { AgentEnv, type AgentEnvRuntime, type AgentResult, type OracleScript, type ToolContext } from "slotpool";

type TaskKind = "create-file" | "fix-script" | "count-files" | "find-text";

export interface ShellTask {
  id: number;
  kind: TaskKind;
  /** Different numbers, names and trees per variant, all derived from it. */
  variant: number;
}

const KINDS: TaskKind[] = ["create-file", "fix-script", "count-files", "find-text"];

/** A tiny deterministic generator so every variant's tree is the same each run. */
function rng(seed: number): () => number {
  let a = seed * 2654435761;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = Math.imul(a ^ (a >>> 15), a | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const q = (s: string) => `'${s.replace(/'/g, `'\\''`)}'`;

/** The generated tree of a count/find task: paths and contents. */
function treeOf(variant: number): { files: Array<[string, string]>; marker: string; markerFile: string; ext: string } {
  const r = rng(variant + 1);
  const dirs = ["src", "src/lib", "logs", "logs/old", "docs", "docs/api", "tmp"];
  const exts = [".log", ".txt", ".md", ".ts"];
  const ext = exts[variant % exts.length]!;
  const files: Array<[string, string]> = [];
  const n = 12 + Math.floor(r() * 10);
  for (let i = 0; i < n; i++) {
    const dir = dirs[Math.floor(r() * dirs.length)]!;
    const e = exts[Math.floor(r() * exts.length)]!;
    files.push([`tree/${dir}/f${i}${e}`, `line ${i}\nfiller ${Math.floor(r() * 1000)}\n`]);
  }
  const marker = `needle-${variant}-${Math.floor(r() * 1e6)}`;
  const pick = Math.floor(r() * files.length);
  const markerFile = files[pick]![0];
  files[pick] = [markerFile, `${files[pick]![1]}the ${marker} is here\n`];
  return { files, marker, markerFile, ext };
}

const BROKEN_SCRIPT = `#!/bin/bash
# Prints the sum of its arguments.
total=0
for n in "$@"; do
  total=$((total - n))
done
echo "total: $total"
`;

const FIXED_SCRIPT = `#!/bin/bash
# Prints the sum of its arguments.
total=0
for n in "$@"; do
  total=$((total + n))
done
echo "$total"
`;

export default class ShellTasksEnv extends AgentEnv<ShellTask> {
  static override envName = "shell-tasks";
  private next = 0;

  constructor(config: Record<string, unknown> = {}, runtime: AgentEnvRuntime = {}) {
    super(
      {
        groupSize: 4,
        totalGroups: 8,
        maxTurns: 12,
        tools: { enabled: ["default"] },
        systemPrompt:
          "You are working in a Linux shell. Your workspace is the current directory. Use the tools to inspect files and run commands; when the task is done, reply with a short summary and no tool call.",
        ...config,
      },
      runtime,
    );
  }

  getNextItem(): ShellTask {
    const id = this.next++;
    return { id, kind: KINDS[id % KINDS.length]!, variant: id };
  }

  override async getEvalItems(): Promise<ShellTask[]> {
    return KINDS.map((kind, i) => ({ id: 1000 + i, kind, variant: 1000 + i }));
  }

  buildTask(task: ShellTask): string {
    const v = task.variant;
    switch (task.kind) {
      case "create-file":
        return `Create the file notes/day-${v}.txt (create the directory if needed) whose content is exactly the single line: release ${v} approved`;
      case "fix-script":
        return "The script calc.sh should print the sum of its arguments as a plain number (for example `bash calc.sh 2 3 4` prints 9), but it prints something wrong. Fix calc.sh.";
      case "count-files": {
        const { ext } = treeOf(v);
        return `Count the files whose name ends in ${ext} anywhere under the directory tree/ and write just that number to answer.txt.`;
      }
      case "find-text": {
        const { marker } = treeOf(v);
        return `Exactly one file under tree/ contains the text "${marker}". Write its path (relative to the current directory, e.g. tree/x/y.txt) to answer.txt.`;
      }
    }
  }

  override async setupWorkspace(task: ShellTask, ctx: ToolContext): Promise<void> {
    if (task.kind === "fix-script") {
      await ctx.writeFile("calc.sh", BROKEN_SCRIPT);
      return;
    }
    if (task.kind === "count-files" || task.kind === "find-text") {
      const { files } = treeOf(task.variant);
      const script = files.map(([path, content]) => `mkdir -p ${q(path.slice(0, path.lastIndexOf("/")))} && printf %s ${q(content)} > ${q(path)}`).join("\n");
      const r = await ctx.terminal(script, { timeout: 60 });
      if (r.exitCode !== 0) throw new Error(`could not generate the tree: ${r.error || r.output}`);
    }
  }

  async computeReward(task: ShellTask, _result: AgentResult, ctx: ToolContext): Promise<number> {
    const v = task.variant;
    switch (task.kind) {
      case "create-file": {
        const r = await ctx.terminal(`test "$(cat notes/day-${v}.txt)" = ${q(`release ${v} approved`)} && echo OK`);
        return r.output.trim() === "OK" ? 1 : 0;
      }
      case "fix-script": {
        // Hidden inputs: the fix must compute a sum, not echo the example's answer.
        const r = await ctx.terminal(`bash calc.sh 2 3 4; bash calc.sh 10 -5 ${v}; bash calc.sh`);
        return r.exitCode === 0 && r.output.trim() === `9\n${5 + v}\n0` ? 1 : 0;
      }
      case "count-files": {
        const { ext, files } = treeOf(v);
        const expected = files.filter(([p]) => p.endsWith(ext)).length;
        // Recount in the slot too: the tree must still be what setup generated.
        const r = await ctx.terminal(`echo "$(tr -d ' \\n' < answer.txt) $(find tree -type f -name ${q(`*${ext}`)} | wc -l)"`);
        const [answer, actual] = r.output.trim().split(" ");
        return answer === String(expected) && actual === String(expected) ? 1 : 0;
      }
      case "find-text": {
        const { markerFile, marker } = treeOf(v);
        const answer = (await ctx.readFile("answer.txt")).content.trim().replace(/^\.\//, "");
        if (answer !== markerFile) return 0;
        const r = await ctx.terminal(`grep -c ${q(marker)} ${q(answer)}`);
        return r.output.trim() === "1" ? 1 : 0;
      }
    }
  }

  /** Correct tool calls for each kind; find-text reads the grep result before answering. */
  override oracle(task: ShellTask): OracleScript {
    const v = task.variant;
    return ({ turn, messages }) => {
      switch (task.kind) {
        case "create-file":
          if (turn === 1) return { toolCalls: [{ name: "bash", arguments: { command: `mkdir -p notes && printf '%s\\n' ${q(`release ${v} approved`)} > notes/day-${v}.txt` } }] };
          return { final: `Created notes/day-${v}.txt.` };
        case "fix-script":
          if (turn === 1) return { toolCalls: [{ name: "read_file", arguments: { path: "calc.sh" } }] };
          if (turn === 2) return { toolCalls: [{ name: "write_file", arguments: { path: "calc.sh", content: FIXED_SCRIPT } }, { name: "bash", arguments: { command: "bash calc.sh 2 3 4" } }] };
          return { final: "calc.sh now adds its arguments and prints the plain sum." };
        case "count-files": {
          const { ext } = treeOf(v);
          if (turn === 1) return { toolCalls: [{ name: "bash", arguments: { command: `find tree -type f -name ${q(`*${ext}`)} | wc -l > answer.txt && cat answer.txt` } }] };
          return { final: "Counted and wrote answer.txt." };
        }
        case "find-text": {
          const { marker } = treeOf(v);
          if (turn === 1) return { toolCalls: [{ name: "bash", arguments: { command: `grep -rl ${q(marker)} tree` } }] };
          if (turn === 2) {
            const last = messages[messages.length - 1];
            const output = (JSON.parse(last?.content ?? "{}") as { output?: string }).output ?? "";
            return { toolCalls: [{ name: "write_file", arguments: { path: "answer.txt", content: output.trim() + "\n" } }] };
          }
          return { final: "Wrote the path to answer.txt." };
        }
      }
    };
  }
}
