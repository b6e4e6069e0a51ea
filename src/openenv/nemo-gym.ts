import { randomUUID } from "node:crypto";
import type { ChatMessage } from "../agent/messages.js";

/** What the verify response is built from: a /run answer (rollout.ts's RunAnswer). */
interface RunRecord {
  status: "scored" | "infra_failure";
  reward: number | null;
  messages: ChatMessage[];
  turns: Array<{ prompt_token_ids?: number[]; completion_token_ids?: number[]; logprobs?: number[] }>;
  mask_sample: boolean;
  failure_kind: string | null;
  failure_reason: string | null;
}

/**
 * NeMo Gym's side of POST /run (NeMo Gym 0.7, `nemo_gym/base_resources_server.py`,
 * `openai_utils.py`, `responses_converter.py`, `failure_kinds.py`): an agent server's `/run`
 * takes `{responses_create_params, ...task fields}` and answers a verify response —
 * `responses_create_params`, `response` (a Responses-API object whose output items carry the
 * turn's `prompt_token_ids` / `generation_token_ids` / `generation_log_probs` on the last item
 * of each model turn, as its vLLM model server does), `reward` (a float: its model has no
 * null), and for an infrastructure failure `mask_sample: true` with a `failure_kind` from its
 * shared vocabulary and a `failure_reason`.
 */

/** Our infra causes as NeMo Gym's failure kinds (its registered names where one fits, else `slotpool:<cause>`). */
const FAILURE_KINDS: Record<string, string> = {
  slot_lost: "session_lost",
  setup: "provider_unavailable",
  sandbox_start: "provider_unavailable",
  sandbox_error: "provider_unavailable",
  no_slot: "provider_unavailable",
  command_killed: "provider_unavailable",
  server_shutdown: "shutdown",
  reward: "verifier_error",
  reward_tool: "verifier_error",
  deadline: "agent_timeout",
  cancelled: "cancelled",
};

/** The NeMo Gym failure kind of one of our infra causes. */
export function failureKindOf(cause: string): string {
  return FAILURE_KINDS[cause] ?? `slotpool:${cause.replace(/[^a-z0-9_]/g, "_")}`;
}

/** The verify response NeMo Gym's rollout collection reads, built from a /run answer. */
export function nemoGymVerifyResponse(answer: RunRecord, params: Record<string, unknown>, initialCount: number): Record<string, unknown> {
  const input = answer.messages.slice(0, initialCount).map((m) => ({ role: m.role, content: m.content ?? "", type: "message" }));
  const model = typeof params["model"] === "string" ? params["model"] : "policy";
  return {
    // The input the model really saw: the env's own prompt for the item, not the request's.
    responses_create_params: { ...params, input },
    response: {
      id: `resp_${randomUUID().replace(/-/g, "")}`,
      created_at: Math.floor(Date.now() / 1000),
      model,
      object: "response",
      output: outputItems(answer),
      parallel_tool_calls: true,
      tool_choice: "auto",
      tools: Array.isArray(params["tools"]) ? params["tools"] : [],
      status: answer.status === "scored" ? "completed" : "incomplete",
    },
    // NeMo Gym's reward is a float; an infra failure's 0.0 is masked (mask_sample), never a score.
    reward: answer.reward ?? 0,
    mask_sample: answer.mask_sample,
    failure_kind: answer.failure_kind,
    failure_reason: answer.failure_reason,
  };
}

/** The rollout after its prompt as Responses output items; each model turn's token information on its last item. */
function outputItems(answer: RunRecord): Array<Record<string, unknown>> {
  const items: Array<Record<string, unknown>> = [];
  let turn = 0;
  const first = answer.messages.findIndex((m) => m.role === "assistant");
  for (const m of first < 0 ? [] : answer.messages.slice(first)) {
    if (m.role === "assistant") {
      const made = assistantItems(m);
      const tokens = answer.turns[turn++];
      if (tokens?.prompt_token_ids && tokens.completion_token_ids && tokens.logprobs) {
        Object.assign(made[made.length - 1]!, { prompt_token_ids: tokens.prompt_token_ids, generation_token_ids: tokens.completion_token_ids, generation_log_probs: tokens.logprobs });
      }
      items.push(...made);
    } else if (m.role === "tool") {
      items.push({ type: "function_call_output", call_id: m.tool_call_id ?? "", output: m.content ?? "", status: "completed" });
    }
  }
  return items;
}

function assistantItems(m: ChatMessage): Array<Record<string, unknown>> {
  const calls = m.tool_calls ?? [];
  const made: Array<Record<string, unknown>> = [];
  if (m.content || calls.length === 0) {
    made.push({ id: `msg_${randomUUID().replace(/-/g, "")}`, type: "message", role: "assistant", status: "completed", content: [{ type: "output_text", text: m.content ?? "", annotations: [] }] });
  }
  for (const c of calls) made.push({ type: "function_call", id: c.id, call_id: c.id, name: c.function.name, arguments: c.function.arguments, status: "completed" });
  return made;
}
