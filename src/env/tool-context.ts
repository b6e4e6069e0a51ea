import type { ToolExecutorLike } from "../executor/types.js";
import type { ToolResult } from "../protocol/tool.js";
import { isSlotLostResult, slotLostErrorFrom } from "./slot-loss.js";

/** What `terminal()` returns: the seeds' `{"exit_code", "output"}`, plus the error text. */
export interface TerminalResult {
  exitCode: number | null;
  output: string;
  error: string;
  success: boolean;
  timedOut: boolean;
}

export interface FileRead {
  /** False when the file does not exist or cannot be read; see `error`. */
  ok: boolean;
  content: string;
  error: string;
}

/**
 * Tool access for `setupWorkspace` and `computeReward`, scoped to one trajectory: every call
 * runs in the trajectory's own slot, which still holds the agent's files and processes
 * (the slot is reset only after the reward is computed). Tool failures come back as
 * results; a lost slot throws `SlotLostError` so the trajectory is restarted.
 */
export class ToolContext {
  constructor(
    readonly trajectoryId: string,
    private readonly executor: ToolExecutorLike,
    private readonly defaults: { timeoutS: number } = { timeoutS: 120 },
  ) {}

  /** Calls any registered tool by name (or alias) with the given arguments. */
  async callTool(name: string, args: Record<string, unknown> = {}, options: { timeoutS?: number } = {}): Promise<ToolResult> {
    const timeoutS = options.timeoutS ?? (typeof args["timeout"] === "number" ? (args["timeout"] as number) : this.defaults.timeoutS);
    const result = await this.executor.execute(this.trajectoryId, { name, arguments: args }, { timeoutMs: timeoutS * 1000 });
    if (isSlotLostResult(result)) throw slotLostErrorFrom(result, this.trajectoryId);
    return result;
  }

  /** Runs a shell command in the slot (`bash`), from /workspace. `timeout` is in seconds. */
  async terminal(command: string, options: { timeout?: number } = {}): Promise<TerminalResult> {
    const timeout = options.timeout ?? this.defaults.timeoutS;
    const r = await this.callTool("bash", { command, timeout }, { timeoutS: timeout });
    const exit = r.metadata["exit_code"];
    return {
      exitCode: typeof exit === "number" ? exit : null,
      output: r.output,
      error: r.error,
      success: r.success,
      timedOut: r.metadata["timeout"] === true,
    };
  }

  async readFile(path: string): Promise<FileRead> {
    const r = await this.callTool("read_file", { path });
    return { ok: r.success, content: r.success ? r.output : "", error: r.error };
  }

  async writeFile(path: string, content: string): Promise<ToolResult> {
    return this.callTool("write_file", { path, content });
  }

  /** Puts bytes into the slot (e.g. fixtures, images) at `path`. */
  async uploadFile(path: string, data: Uint8Array | string): Promise<ToolResult> {
    const bytes = typeof data === "string" ? Buffer.from(data, "utf8") : Buffer.from(data);
    return this.callTool("write_file", { path, content: bytes.toString("base64"), encoding: "base64" });
  }

  /** Reads a file of the slot as bytes (artifact read). Throws when it cannot be read. */
  async downloadFile(path: string, options: { maxBytes?: number } = {}): Promise<Buffer> {
    const r = await this.executor.readArtifact(this.trajectoryId, { path, encoding: "base64", ...(options.maxBytes ? { max_bytes: options.maxBytes } : {}) });
    if (!r.success) throw new Error(`cannot download ${path} from trajectory ${this.trajectoryId}'s workspace: ${r.error ?? "read failed"}`);
    return Buffer.from(r.content, r.encoding === "base64" ? "base64" : "utf8");
  }

  /** Lists files of the slot (artifact list). */
  async listFiles(path = ".", options: { recursive?: boolean; maxEntries?: number } = {}) {
    return this.executor.listArtifacts(this.trajectoryId, { path, recursive: options.recursive ?? false, ...(options.maxEntries ? { max_entries: options.maxEntries } : {}) });
  }

  /** A tar.gz of a directory of the slot (base64 in the answer). */
  async archive(path = ".", options: { maxBytes?: number } = {}) {
    return this.executor.archiveArtifacts(this.trajectoryId, { path, ...(options.maxBytes ? { max_bytes: options.maxBytes } : {}) });
  }
}
