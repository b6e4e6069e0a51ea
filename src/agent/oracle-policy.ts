import { randomBytes } from "node:crypto";
import type { ChatMessage, OpenAIToolCall } from "./messages.js";
import type { AgentPolicy, PolicyTurn, PolicyTurnInput } from "./policy.js";

/** One scripted step: tool calls to issue (in order), or a final answer that ends the rollout. */
export type OracleStep =
  | { toolCalls: Array<{ name: string; arguments: Record<string, unknown> }>; content?: string }
  | { final: string };

/**
 * Decides the next step from the conversation so far (the tool results are in `messages`).
 * Returning undefined ends the rollout with an empty final answer.
 */
export type OracleScript = (input: PolicyTurnInput) => OracleStep | undefined | Promise<OracleStep | undefined>;

/**
 * A scripted "model" that emits known-correct tool calls, so an env and its reward can be
 * exercised end to end with no inference server. It produces no tokens (none exist).
 */
export class OraclePolicy implements AgentPolicy {
  readonly name = "oracle";
  constructor(
    private readonly script: OracleScript,
    /** Set on a branch's copy (`fork`): handed to the script as `input.branch`. */
    private readonly branch?: number,
  ) {}

  fork(branch: number): OraclePolicy {
    return new OraclePolicy(this.script, branch);
  }

  /** Steps played in order regardless of the tool results; after the last one, the rollout ends. */
  static fromSteps(steps: OracleStep[]): OraclePolicy {
    return new OraclePolicy(({ turn }) => steps[turn - 1]);
  }

  async nextTurn(input: PolicyTurnInput): Promise<PolicyTurn> {
    const step = await this.script(this.branch === undefined ? input : { ...input, branch: this.branch });
    if (!step || "final" in step) {
      return { message: { role: "assistant", content: step?.final ?? "" }, finishReason: "stop" };
    }
    const calls: OpenAIToolCall[] = step.toolCalls.map((c) => ({
      id: `call_${randomBytes(6).toString("hex")}`,
      type: "function",
      function: { name: c.name, arguments: JSON.stringify(c.arguments) },
    }));
    const message: ChatMessage = { role: "assistant", content: step.content ?? null, tool_calls: calls };
    return { message, finishReason: "tool_calls" };
  }
}
