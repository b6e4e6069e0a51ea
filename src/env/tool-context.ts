import { boundedTimeoutS, MAX_TIMEOUT_S, MIN_TIMEOUT_S, requestedTimeoutS, type TimeoutBounds } from "../executor/config.js";
import type { ToolExecutorLike } from "../executor/types.js";
import type { ToolResult } from "../protocol/tool.js";
import { toolInfraCause } from "../protocol/infra.js";
import { PathRefusedError, ToolContextError, ToolContextInfraError } from "./errors.js";
import { browserAct, browserGetImages, browserNavigate, browserSnapshot, browserVision, type BrowserImage, type BrowserPage, type BrowserSnapshot } from "./browser-context.js";

/** The env's tool timeouts (its `executor` section) as a ToolContext takes them; `timeoutS` replaces the default (the reward's `rewardTimeoutS`). */
export function envToolTimeouts(executor: { defaultTimeoutS: number; minTimeoutS: number; maxTimeoutS: number }, timeoutS = executor.defaultTimeoutS): { timeoutS: number; minTimeoutS: number; maxTimeoutS: number } {
  return { timeoutS, minTimeoutS: executor.minTimeoutS, maxTimeoutS: executor.maxTimeoutS };
}

/** What `terminal()` returns: the seeds' `{"exit_code", "output"}`, plus the error text. */
export interface TerminalResult {
  exitCode: number | null;
  output: string;
  /** The command's stderr summary; empty when it exited 0. */
  error: string;
  /** The command ran and exited 0. */
  success: boolean;
  timedOut: boolean;
}

export interface FileRead {
  /** False only when the file does not exist (the agent did not make it); see `error`. */
  ok: boolean;
  content: string;
  error: string;
}

/** The rule a refused path broke, said plainly: the sandbox's own message follows it. */
const PATH_RULE = "paths must be inside /workspace";
const REFUSED_PROBLEMS = new Set(["outside", "symlink_outside", "invalid"]);
/** Older servers send no `path_problem`; their messages say the same thing in these words. */
const REFUSED_TEXT = /outside the workspace|escapes the workspace|leads outside the workspace|resolved outside the workspace/;

/**
 * Tool access for `setupWorkspace` and the reward, scoped to one trajectory: every call runs
 * in the trajectory's own slot, which still holds the agent's files and processes (the slot
 * is reset only after the reward is computed).
 *
 * Every method either does what it says or throws — never a `success: false` that a reward
 * could mistake for the agent's result:
 *  - a lost slot throws the executor's `SlotLostError` as it is (the trajectory is restarted on a new slot);
 *  - a call the infrastructure could not run or cut off (a sandbox that did not start, a
 *    command, file or artifact call cut off by a shutdown or an outside reset, a sandbox
 *    server that could not be asked: the result's infra marker) throws
 *    `ToolContextInfraError`: the trajectory is an infra failure, never scored;
 *  - a refused path throws `PathRefusedError` naming the rule ("paths must be inside /workspace");
 *  - any other failure of the call throws `ToolContextError`.
 * What the agent did is a result: a command's non-zero exit (`terminal`) and a missing file
 * (`readFile` → `ok: false`). See docs/env-authoring.md for each method's contract.
 */
export class ToolContext {
  private readonly bounds: TimeoutBounds;

  /**
   * `timeouts`: the default of a call that names no timeout (`timeoutS`), and the floor and
   * ceiling every timeout asked for is clamped to (default 1..600 s). The env gives its
   * `executor` bounds to the setup's and the in-process tools' context, and
   * `rewardTimeoutS` as the reward's default.
   */
  constructor(
    readonly trajectoryId: string,
    private readonly executor: ToolExecutorLike,
    timeouts: { timeoutS: number; minTimeoutS?: number; maxTimeoutS?: number } = { timeoutS: 120 },
  ) {
    const minS = Math.max(MIN_TIMEOUT_S, timeouts.minTimeoutS ?? MIN_TIMEOUT_S);
    const maxS = Math.max(minS, Math.min(MAX_TIMEOUT_S, timeouts.maxTimeoutS ?? MAX_TIMEOUT_S));
    this.bounds = { minS, maxS, defaultS: Math.min(maxS, Math.max(minS, timeouts.timeoutS)) };
  }

  /** The timeout a call gets, seconds: `askedS` (or the call's own `timeout` argument) within the context's bounds, else its default. */
  timeoutFor(askedS: number | undefined): number {
    return boundedTimeoutS(askedS, this.bounds);
  }

  /**
   * Calls any registered tool by name (or alias) and returns its raw result, failures
   * included (the escape hatch: check `success` yourself). Throws `SlotLostError`, and
   * `ToolContextInfraError` when the infrastructure did not let the call run to its end.
   */
  async callTool(name: string, args: Record<string, unknown> = {}, options: { timeoutS?: number } = {}): Promise<ToolResult> {
    const timeoutS = this.timeoutFor(options.timeoutS ?? requestedTimeoutS(args));
    const r = await this.executor.execute(this.trajectoryId, { name, arguments: args }, { timeoutMs: timeoutS * 1000 });
    const infra = toolInfraCause(r.metadata);
    if (infra) throw new ToolContextInfraError(`${name} could not run to its end in trajectory ${this.trajectoryId}'s slot (${infra}): ${r.error || "no reason given"}`, name, infra);
    return r;
  }

  /**
   * Runs a shell command in the slot (`bash`), from /workspace; `timeout` in seconds. Returns
   * whenever the command ran, whatever its exit code (or timeout); throws when it could not run.
   */
  async terminal(command: string, options: { timeout?: number } = {}): Promise<TerminalResult> {
    const timeout = this.timeoutFor(options.timeout);
    const r = await this.callTool("bash", { command, timeout }, { timeoutS: timeout });
    const exit = r.metadata["exit_code"];
    const timedOut = r.metadata["timeout"] === true;
    if (!r.success && typeof exit !== "number" && !timedOut) {
      throw new ToolContextError(`terminal: the command could not run in trajectory ${this.trajectoryId}'s slot: ${r.error || "no reason given"}`, "bash");
    }
    return { exitCode: typeof exit === "number" ? exit : null, output: r.output, error: r.error, success: r.success, timedOut };
  }

  /** The file's text; `ok: false` when it does not exist. Throws for a refused path or any other failure. */
  async readFile(path: string): Promise<FileRead> {
    const r = await this.callTool("read_file", { path });
    if (r.success) return { ok: true, content: r.output, error: "" };
    if (r.metadata["path_problem"] === "not_found" || (r.metadata["path_problem"] === undefined && /not found|No such file/i.test(r.error))) {
      return { ok: false, content: "", error: r.error };
    }
    throw this.failure("readFile", "read_file", path, r.error, r.metadata["path_problem"]);
  }

  /** Writes a text file (parents created). Throws for a refused path or any other failure. */
  async writeFile(path: string, content: string): Promise<ToolResult> {
    return this.checked("writeFile", "write_file", path, await this.callTool("write_file", { path, content }));
  }

  /** Puts bytes into the slot (fixtures, images) at `path`. Throws like writeFile. */
  async uploadFile(path: string, data: Uint8Array | string): Promise<ToolResult> {
    const bytes = typeof data === "string" ? Buffer.from(data, "utf8") : Buffer.from(data);
    return this.checked("uploadFile", "write_file", path, await this.callTool("write_file", { path, content: bytes.toString("base64"), encoding: "base64" }));
  }

  /** A file of the slot as bytes. Throws when it cannot be read (missing file included). */
  async downloadFile(path: string, options: { maxBytes?: number } = {}): Promise<Buffer> {
    const r = await this.executor.readArtifact(this.trajectoryId, { path, encoding: "base64", ...(options.maxBytes ? { max_bytes: options.maxBytes } : {}) });
    if (!r.success) throw this.artifactFailure("downloadFile", path, r.error, r.metadata);
    return Buffer.from(r.content, r.encoding === "base64" ? "base64" : "utf8");
  }

  /** The entries under `path` (artifact list). Throws when it cannot be listed. */
  async listFiles(path = ".", options: { recursive?: boolean; maxEntries?: number } = {}) {
    const r = await this.executor.listArtifacts(this.trajectoryId, { path, recursive: options.recursive ?? false, ...(options.maxEntries ? { max_entries: options.maxEntries } : {}) });
    if (!r.success) throw this.artifactFailure("listFiles", path, r.error, r.metadata);
    return r;
  }

  /** A tar.gz of a directory of the slot (base64 in the answer). Throws when it cannot be made. */
  async archive(path = ".", options: { maxBytes?: number } = {}) {
    const r = await this.executor.archiveArtifacts(this.trajectoryId, { path, ...(options.maxBytes ? { max_bytes: options.maxBytes } : {}) });
    if (!r.success) throw this.artifactFailure("archive", path, r.error, r.metadata);
    return r;
  }

  // ---- The browser the model used in this slot (browser-context.ts; docs/browser.md) ----

  /** Loads `url` in the trajectory's browser (started if the agent never opened one); its final url and title. */
  browserNavigate(url: string): Promise<BrowserPage> {
    return browserNavigate(this.browserCall, this.trajectoryId, url);
  }

  /** The page the agent left, as the model reads it (compact, or `full`); `ok: false` when no page is open. */
  browserSnapshot(options: { full?: boolean } = {}): Promise<BrowserSnapshot> {
    return browserSnapshot(this.browserCall, this.trajectoryId, options);
  }

  browserClick(ref: string): Promise<Record<string, unknown>> {
    return browserAct(this.browserCall, this.trajectoryId, "browser_click", { ref });
  }

  browserType(ref: string, text: string): Promise<Record<string, unknown>> {
    return browserAct(this.browserCall, this.trajectoryId, "browser_type", { ref, text });
  }

  browserScroll(direction: "up" | "down"): Promise<Record<string, unknown>> {
    return browserAct(this.browserCall, this.trajectoryId, "browser_scroll", { direction });
  }

  browserBack(): Promise<Record<string, unknown>> {
    return browserAct(this.browserCall, this.trajectoryId, "browser_back");
  }

  browserPress(key: string): Promise<Record<string, unknown>> {
    return browserAct(this.browserCall, this.trajectoryId, "browser_press", { key });
  }

  browserClose(): Promise<Record<string, unknown>> {
    return browserAct(this.browserCall, this.trajectoryId, "browser_close");
  }

  browserGetImages(): Promise<BrowserImage[]> {
    return browserGetImages(this.browserCall, this.trajectoryId);
  }

  /** The env's vision model's answer about the page (throws when none is configured). */
  browserVision(question: string): Promise<string> {
    return browserVision(this.browserCall, this.trajectoryId, question);
  }

  private readonly browserCall = (name: string, args: Record<string, unknown> = {}): Promise<ToolResult> => this.callTool(name, args);

  private checked(method: string, tool: string, path: string, r: ToolResult): ToolResult {
    if (!r.success) throw this.failure(method, tool, path, r.error, r.metadata["path_problem"]);
    return r;
  }

  private failure(method: string, tool: string, path: string, error: string, problem: unknown): ToolContextError {
    const refused = typeof problem === "string" ? REFUSED_PROBLEMS.has(problem) : REFUSED_TEXT.test(error);
    if (refused) return new PathRefusedError(`${method} ${JSON.stringify(path)} refused: ${PATH_RULE} (${error})`, tool, path);
    return new ToolContextError(`${method} ${JSON.stringify(path)} failed in trajectory ${this.trajectoryId}'s slot: ${error || "no reason given"}`, tool, path);
  }

  /** A failed artifact call: an infra failure when the infrastructure cut it off or could not answer (its marker), as for tool calls. */
  private artifactFailure(method: string, path: string, error: string | undefined, metadata: Record<string, unknown> | undefined): Error {
    const infra = toolInfraCause(metadata);
    if (infra) return new ToolContextInfraError(`${method} ${JSON.stringify(path)} could not run to its end in trajectory ${this.trajectoryId}'s slot (${infra}): ${error || "no reason given"}`, "artifacts", infra);
    return this.failure(method, "artifacts", path, error ?? "", undefined);
  }
}
