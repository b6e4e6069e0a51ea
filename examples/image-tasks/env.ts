/**
 * image-tasks: each item brings its own container image (the shape of SWE-bench, Terminal-Bench
 * and E2B-template workloads). Items alternate between two images:
 *
 * - `python` items run in a Python image (config `pythonImage`), straight from the image: the
 *   answer must come from the image's own `python3` (the sandbox image has none);
 * - `busybox` items run in a BusyBox image (config `busyboxImage`, no bash, no libc) with a
 *   template on top of it (a file in its WorkingDir and a setup command, built once per
 *   container): the answer must be written to /solution, a directory only root may make, with
 *   the image's own tools, and the reward checks it is BusyBox that is there.
 *
 * `workspaceTemplate(item)` names the image (and, for a template, what to build on it); the
 * pool sends each trajectory to a container that holds its image. `setupWorkspace` writes the
 * item's data into the image's WorkingDir (relative paths start there). Every path of the slot
 * is writable (its own upper layer), and a reset drops what the trajectory changed.
 *
 * It ships an oracle policy, so it runs without a model:
 *
 *   slotpool process examples/image-tasks/env.js \
 *     --set pythonImage=registry.local:5000/python:3.12 --set busyboxImage=registry.local:5000/busybox:1.36 \
 *     --insecure-registry registry.local:5000
 *
 * (the defaults are Docker Hub's python:3.12-slim and busybox:1.36). See docs/images.md.
 * Written against slotpool's public API only.
 */
import { z } from "zod";
import { AgentEnv, type AgentEnvRuntime, type AgentResult, type OracleScript, type TemplateSpec, type ToolContext } from "slotpool";
import { AgentEnvConfigSchema, withConfigDefaults } from "slotpool/env";

export interface ImageTask {
  id: number;
  kind: "python" | "busybox";
  /** The numbers the task is about (python: their sum; busybox: how many lines they fill). */
  numbers: number[];
}

const ImageTasksConfigSchema = AgentEnvConfigSchema.extend({
  /** The image `python` items run in (it must have python3 on its PATH). */
  pythonImage: z.string().min(1).default("docker.io/library/python:3.12-slim"),
  /** The image `busybox` items run in (BusyBox's applets on its PATH). */
  busyboxImage: z.string().min(1).default("docker.io/library/busybox:1.36"),
});
type ImageTasksConfig = z.output<typeof ImageTasksConfigSchema>;

export default class ImageTasksEnv extends AgentEnv<ImageTask, ImageTasksConfig> {
  static override envName = "image-tasks";
  static override configSchema = ImageTasksConfigSchema;
  private next = 0;

  constructor(config: Record<string, unknown> = {}, runtime: AgentEnvRuntime = {}) {
    super(
      withConfigDefaults(
        {
          groupSize: 2,
          totalGroups: 4,
          maxTurns: 6,
          tools: { enabled: ["default"] },
          systemPrompt: "You work in a container whose image the task names. Use the tools; when done, reply with a short summary and no tool call.",
        },
        config,
      ),
      runtime,
    );
  }

  getNextItem(): ImageTask {
    const id = this.next++;
    const numbers = Array.from({ length: 3 + (id % 4) }, (_, i) => (id + 1) * 7 + i * 3);
    return { id, kind: id % 2 === 0 ? "python" : "busybox", numbers };
  }

  override async getEvalItems(): Promise<ImageTask[]> {
    return [0, 1, 2, 3].map((id) => ({ id: 1000 + id, kind: id % 2 === 0 ? "python" : "busybox", numbers: [id, id + 1, id + 2] }));
  }

  /** The item's image; for busybox items a template on it (built once per container), shared by every such item. */
  override workspaceTemplate(task: ImageTask): TemplateSpec {
    if (task.kind === "python") return { name: "python", image: this.config.pythonImage };
    return {
      name: "busybox-tasks",
      image: this.config.busyboxImage,
      files: { "HOWTO.txt": "Answers go to /solution/answer.txt.\n" },
      setup: ["mkdir -p /opt/task && echo ready > /opt/task/status"],
    };
  }

  /** The item's data, in the image's WorkingDir. */
  override async setupWorkspace(task: ImageTask, ctx: ToolContext): Promise<void> {
    await ctx.writeFile(task.kind === "python" ? "data.txt" : "notes.txt", task.numbers.join("\n") + "\n");
  }

  buildTask(task: ImageTask): string {
    if (task.kind === "python") return "data.txt in the working directory holds one integer per line. Write solution.py that prints their sum, and run it with this image's python3.";
    return "notes.txt in the working directory has some lines. Write the number of its lines to /solution/answer.txt (make /solution).";
  }

  async computeReward(task: ImageTask, _result: AgentResult, ctx: ToolContext): Promise<number> {
    if (task.kind === "python") {
      // The image's own interpreter runs the agent's program: a slot without the image has none.
      const r = await ctx.terminal("python3 solution.py && python3 -c 'import sys; print(\"py\", sys.version_info[0])'");
      const sum = task.numbers.reduce((a, b) => a + b, 0);
      return r.output.trim() === `${sum}\npy 3` ? 1 : 0;
    }
    // The template's build ran in the image (its status file), the answer is root's, and BusyBox is there.
    const r = await ctx.terminal("cat /opt/task/status /solution/answer.txt; busybox 2>&1 | head -1 | cut -d' ' -f1");
    return r.output.trim() === `ready\n${task.numbers.length}\nBusyBox` ? 1 : 0;
  }

  /** What an agent would do: write the program or the answer, then run it. */
  override oracle(task: ImageTask): OracleScript {
    return ({ turn }) => {
      if (turn === 1 && task.kind === "python") {
        return {
          toolCalls: [
            { name: "write_file", arguments: { path: "solution.py", content: "print(sum(int(l) for l in open('data.txt') if l.strip()))\n" } },
            { name: "bash", arguments: { command: "python3 solution.py" } },
          ],
        };
      }
      if (turn === 1) return { toolCalls: [{ name: "bash", arguments: { command: "mkdir -p /solution && wc -l < notes.txt > /solution/answer.txt && cat /solution/answer.txt" } }] };
      return { final: "done" };
    };
  }
}
