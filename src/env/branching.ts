import { randomUUID } from "node:crypto";
import { runAgentLoop, type AgentResult } from "../agent/agent-loop.js";
import type { ChatMessage } from "../agent/messages.js";
import type { AgentPolicy } from "../agent/policy.js";
import type { Logger } from "../observability/logger.js";
import type { TemplateSpec } from "../pool/template-affinity.js";
import type { BranchNode, BranchTree } from "../report/branch-tree.js";
import type { GroupTools } from "../tools/distributions.js";
import type { ToolBackend } from "./backend.js";
import type { AgentEnvConfig } from "./config.js";
import { EnvError } from "./errors.js";
import { scoreRollout, type RolloutScore } from "./rollout-score.js";
import { infraFailureOf, type InfraCause, type InfraFailure } from "./infra-failure.js";
import { linkedSignal } from "./linked-signal.js";
import type { Metrics } from "./metrics.js";
import { isSlotLostError } from "../pool/errors.js";
import { buildScoredGroup, trajectoryTokens, type GroupOutcome, type TrajectoryOutcome } from "./scored-group.js";
import { envToolTimeouts, ToolContext } from "./tool-context.js";
import { rewardContext } from "./reward-calls.js";
import { requestedTimeoutS } from "../executor/config.js";
import { routeToolCall } from "./env-tools.js";
import type { TextTokenizer } from "./tokens.js";

/**
 * Where a branching group forks its trajectory (`AgentEnv.branchPoint(item)`):
 * - `{afterTurn: n}`: after the model's n-th turn and its tool results;
 * - `{afterTool: name, occurrence?: k}`: after the turn holding the k-th (default 1st) call of
 *   tool `name` (aliases count: `terminal` is `bash`), and its results.
 */
export type BranchPoint = { afterTurn: number } | { afterTool: string; occurrence?: number };

/** What the branching group needs of its env (AgentEnv hands itself and its private parts over). */
export interface BranchingEnv<Item> {
  readonly name: string;
  readonly config: AgentEnvConfig;
  readonly tools: ToolBackend;
  resolveTools(): GroupTools;
  policyFor(item: Item): AgentPolicy;
  initialMessages(item: Item): ChatMessage[];
  workspaceTemplate(item: Item): TemplateSpec | undefined;
  setupWorkspace(item: Item, ctx: ToolContext): Promise<void>;
  verifyAndScore(item: Item, result: AgentResult, ctx: ToolContext): Promise<{ score: number; metadata?: Record<string, unknown>; metrics?: Metrics }>;
  /** The item's turn limit (AgentEnv.turnsFor). */
  turnsFor(item: Item): number;
}

/**
 * A branching group (docs/fork.md): one trajectory runs to the branch point in its slot;
 * the slot is forked into `groupSize - 1` sibling slots (copy-on-write copies of the
 * workspace, `executor.fork`); every branch continues from the same conversation — with a
 * token-exact policy from the same ids, so the shared prefix is generated once — branch 0 in
 * the root's slot. Each branch is scored in its own slot; the group's rows are the branches'
 * full sequences (a valid Atropos group) and the tree (prefix once, each branch's segment)
 * goes in the line's `slotpool.tree`. Infra failures follow `infraFailurePolicy` as in a
 * plain group; a lost slot loses the whole tree (the prefix is generated again on a retry).
 */
export async function collectBranchingGroup<Item>(
  env: BranchingEnv<Item>,
  item: Item,
  point: BranchPoint,
  parts: { tokenizer: TextTokenizer | undefined; log: Logger; scoreGroup?: (trajectories: TrajectoryOutcome[]) => Promise<{ metrics?: Metrics; failures: InfraFailure[] }> },
  options: { signal?: AbortSignal } = {},
): Promise<GroupOutcome<Item>> {
  const groupTools = env.resolveTools();
  const { infraFailurePolicy: policy, infraRetries, groupSize } = env.config;
  const infraFailures: InfraFailure[] = [];
  const droppedAttemptCauses: InfraCause[] = [];
  const common = { item, toolsets: groupTools.toolsets, infraFailures, droppedAttemptCauses };
  const unfinished = { slotLosses: 0, retries: 0 };
  // The same rules as a plain group (group-collector.ts): a branch with an infra failure is
  // never scored; the tree is dropped and its item tried again, masked, or the run stops.
  for (let attempt = 0; ; attempt++) {
    let leaves: TrajectoryOutcome[];
    try {
      // One listener on the run's signal per tree; its branches (up to groupSize, each a few calls) listen on the tree's.
      const link = options.signal ? linkedSignal(options.signal, groupSize * 3) : undefined;
      try {
        leaves = await branchOnce(env, item, point, groupTools, parts, link?.signal);
      } finally {
        link?.release();
      }
    } catch (err) {
      options.signal?.throwIfAborted();
      const message = `branching group failed: ${err instanceof Error ? err.message : String(err)}`;
      // Setup or a tool call cut off by the infrastructure (where exactly is in the message).
      const infra = infraFailureOf(err, "tool");
      if (!isSlotLostError(err) && !infra) {
        parts.log.error({ reason: message }, "group failed");
        return { ok: false, kind: "error", fatal: false, reason: message, trajectories: [], unfinished, ...common };
      }
      // A lost slot or an infra failure: no branch can go on without the prefix, so the whole tree is an infra failure.
      if (!infra) unfinished.slotLosses++;
      leaves = [];
      infraFailures.push(infra ? { ...infra, message } : { cause: "slot_lost", message });
      droppedAttemptCauses.push(infra ? infra.cause : "slot_lost");
      if (policy === "drop" && attempt < infraRetries) {
        unfinished.retries++;
        parts.log.warn({ attempt: attempt + 1, infraRetries }, `${message}; the tree is dropped and its item tried again`);
        continue;
      }
      parts.log.error({ reason: message }, "group dropped");
      return { ok: false, kind: "infra", fatal: policy === "fail", reason: message, trajectories: [], unfinished, ...common };
    }
    let metrics: Metrics | undefined;
    const ownScored = leaves.filter((l) => !l.infraFailure);
    // Group scoring only for a tree that would be delivered, as in a plain group.
    if (parts.scoreGroup && ownScored.length > 0 && (ownScored.length === leaves.length || policy === "mask")) {
      metrics = (await parts.scoreGroup(ownScored)).metrics;
      // The tree drawn in the report shows the scores the group was given.
      for (const node of leaves[0]?.branchTree?.nodes ?? []) {
        const leaf = leaves.find((l) => l.trajectoryId === node.trajectory_id);
        if (leaf && node.score !== undefined) node.score = leaf.score;
      }
    }
    const failed = leaves.filter((l) => l.infraFailure);
    const scored = leaves.filter((l) => !l.infraFailure);
    infraFailures.push(...failed.map((l) => l.infraFailure!));
    if (failed.length === 0 || (policy === "mask" && scored.length > 0)) {
      const group = buildScoredGroup(scored, {
        groupSize,
        includeMessages: env.config.trainer.includeMessages,
        generationParams: { temperature: env.config.model.temperature, max_tokens: env.config.model.maxTokens },
      });
      return { ok: true, group, trajectories: scored, masked: failed.length, droppedAttempts: attempt, ...(metrics ? { metrics } : {}), ...common };
    }
    droppedAttemptCauses.push(failed[0]!.infraFailure!.cause);
    const what = `${failed.length} of ${groupSize} branches had an infrastructure failure: ${[...new Set(failed.map((l) => `${l.infraFailure!.cause}: ${l.infraFailure!.message}`))].join(" | ")}`;
    if (policy === "drop" && attempt < infraRetries) {
      parts.log.warn({ attempt: attempt + 1, infraRetries }, `${what}; the tree is dropped and its item tried again`);
      continue;
    }
    const reason = policy === "fail" ? `${what} (infraFailurePolicy "fail": the run stops)` : `${what}; dropped after ${attempt + 1} tries`;
    parts.log.error({ reason }, "group dropped");
    return { ok: false, kind: "infra", fatal: policy === "fail", reason, trajectories: scored, unfinished, ...common };
  }
}

/** One tree: the root to the branch point, the fork, every branch to its end, each scored. */
async function branchOnce<Item>(
  env: BranchingEnv<Item>,
  item: Item,
  point: BranchPoint,
  groupTools: GroupTools,
  parts: { tokenizer: TextTokenizer | undefined; log: Logger },
  signal: AbortSignal | undefined,
): Promise<TrajectoryOutcome[]> {
  const backend = env.tools;
  const size = env.config.groupSize;
  const rootId = randomUUID();
  const childIds = Array.from({ length: size - 1 }, () => randomUUID());
  const held = [rootId];
  const started = performance.now();
  const isKnownTool = (name: string) => {
    const def = backend.registry.resolve(name);
    return def !== undefined && groupTools.names.includes(def.name);
  };
  // A lost slot rejects with SlotLostError (caught below).
  const executeFor = (trajectoryId: string) => {
    const ctx = new ToolContext(trajectoryId, backend.executor, envToolTimeouts(env.config.executor));
    return (call: Parameters<typeof backend.executor.execute>[1]) =>
      routeToolCall(backend.registry, call, ctx, (call) =>
        // The model's own `timeout` within the env's bounds, as in collectTrajectory.
        backend.executor.execute(trajectoryId, call, { timeoutMs: ctx.timeoutFor(requestedTimeoutS(call.arguments ?? {})) * 1000, ...(signal ? { signal } : {}) }),
      );
  };
  try {
    const setupStarted = performance.now();
    const template = env.workspaceTemplate(item);
    if (template) {
      if (!backend.executor.prepareWorkspace) throw new EnvError(`env ${env.name} names a workspace template but its executor cannot prepare one`);
      await backend.executor.prepareWorkspace(rootId, template, signal ? { signal } : {});
    }
    await env.setupWorkspace(item, new ToolContext(rootId, backend.executor, envToolTimeouts(env.config.executor)));
    const workspaceSetupMs = performance.now() - setupStarted;
    const policy = env.policyFor(item);
    const root = await runAgentLoop({
      policy,
      tools: groupTools.tools,
      messages: env.initialMessages(item),
      maxTurns: env.turnsFor(item),
      ...(signal ? { signal } : {}),
      isKnownTool,
      executeTool: executeFor(rootId),
      stopBefore: ({ result }) => reached(point, result, (n) => backend.registry.resolve(n)?.name ?? n),
    });
    const branched = root.finishReason === "branch";
    const forkStarted = performance.now();
    if (childIds.length > 0) {
      if (!backend.executor.fork) throw new EnvError(`env ${env.name} branches its groups but its executor cannot fork slots`);
      await backend.executor.fork(rootId, childIds, signal ? { signal } : {});
      held.push(...childIds);
    }
    const forkMs = performance.now() - forkStarted;
    const ids = [rootId, ...childIds];
    const leaves = await Promise.all(
      ids.map(async (trajectoryId, branch) => {
        const branchStarted = performance.now();
        const result = branched
          ? await runAgentLoop({
              policy: policy.fork?.(branch) ?? env.policyFor(item),
              tools: groupTools.tools,
              messages: root.messages,
              resume: root,
              maxTurns: env.turnsFor(item),
              ...(signal ? { signal } : {}),
              isKnownTool,
              executeTool: executeFor(trajectoryId),
            })
          : copyResult(root);
        return score(env, item, trajectoryId, result, parts, performance.now() - branchStarted);
      }),
    );
    signal?.throwIfAborted();
    const tree = branchTree(point, branched, root, leaves, parts.tokenizer);
    for (const l of leaves) {
      l.branchTree = tree;
      l.workspaceSetupMs = workspaceSetupMs + forkMs;
      l.durationMs = performance.now() - started;
    }
    return leaves;
  } finally {
    await Promise.all(
      held.map((id) =>
        backend.executor.release(id, { reset: true }).catch((err: unknown) => parts.log.warn({ trajectoryId: id, err: String(err) }, "releasing the slot failed")),
      ),
    );
  }
}

/** Whether the root has reached the branch point (asked before each of its turns). */
function reached(point: BranchPoint, result: AgentResult, canonical: (name: string) => string): boolean {
  if ("afterTurn" in point) return result.turnsUsed >= point.afterTurn;
  const want = canonical(point.afterTool);
  return result.toolCalls.filter((c) => canonical(c.tool) === want).length >= (point.occurrence ?? 1);
}

function describe(point: BranchPoint): string {
  if ("afterTurn" in point) return `after turn ${point.afterTurn}`;
  const k = point.occurrence ?? 1;
  return `after the ${k}${k === 1 ? "st" : k === 2 ? "nd" : k === 3 ? "rd" : "th"} ${point.afterTool} call`;
}

function copyResult(r: AgentResult): AgentResult {
  return { ...r, messages: [...r.messages], toolCalls: [...r.toolCalls], toolErrors: [...r.toolErrors], turns: [...r.turns], usage: { ...r.usage } };
}

async function score<Item>(env: BranchingEnv<Item>, item: Item, trajectoryId: string, result: AgentResult, parts: { tokenizer: TextTokenizer | undefined; log: Logger }, durationMs: number): Promise<TrajectoryOutcome> {
  // The reward's own timeout and recorded calls, as in collectTrajectory.
  const { ctx, calls: rewardCalls } = rewardContext(trajectoryId, env.tools.executor, env.config.rewardTimeoutS, env.config.executor.minTimeoutS);
  const producedNothing = result.finishReason !== "error" && (result.turnsUsed === 0 || result.messages.every((m) => m.role === "system" || m.role === "user"));
  const scored: RolloutScore = producedNothing ? { score: 0, scoreMetadata: {} } : await scoreRollout(result, trajectoryId, () => env.verifyAndScore(item, result, ctx), parts.log);
  const { tokens, brokenSegments } = trajectoryTokens(result, parts.tokenizer);
  const outcome: TrajectoryOutcome = { trajectoryId, result, score: scored.score, rewardSkipped: producedNothing || scored.infraFailure?.cause === "model", scoreMetadata: scored.scoreMetadata, attempts: 1, slotLosses: [], tokens, durationMs };
  if (brokenSegments.length > 0) outcome.brokenSegments = brokenSegments;
  if (scored.metrics) outcome.metrics = scored.metrics;
  if (scored.rewardError) outcome.rewardError = scored.rewardError;
  if (scored.infraFailure) outcome.infraFailure = scored.infraFailure;
  if (rewardCalls.length > 0) outcome.rewardCalls = rewardCalls;
  return outcome;
}

/** The tree: the root's prefix once, each branch's own segment (ids after the prefix's, when it extends it). */
function branchTree(point: BranchPoint, branched: boolean, root: AgentResult, leaves: TrajectoryOutcome[], tokenizer: TextTokenizer | undefined): BranchTree {
  const prefix = trajectoryTokens(root, tokenizer).tokens;
  const generated = (r: AgentResult) => r.usage.completion_tokens;
  const rootNode: BranchNode = { id: "root", parent: null, turns: [1, root.turnsUsed], messages: [0, root.messages.length], completion_tokens: generated(root) };
  if (prefix && branched) {
    rootNode.tokens = prefix.tokens;
    rootNode.masks = prefix.masks;
  }
  const nodes: BranchNode[] = [rootNode];
  leaves.forEach((l, i) => {
    const r = l.result;
    const node: BranchNode = {
      id: `b${i}`,
      parent: "root",
      row: rowOf(leaves, i),
      trajectory_id: l.trajectoryId,
      turns: [root.turnsUsed + 1, r.turnsUsed],
      messages: [root.messages.length, r.messages.length],
      completion_tokens: generated(r) - generated(root),
      score: l.score,
    };
    const seq = l.tokens;
    if (seq && rootNode.tokens && rootNode.tokens.every((id, k) => seq.tokens[k] === id)) {
      node.tokens = seq.tokens.slice(rootNode.tokens.length);
      node.masks = seq.masks.slice(rootNode.tokens.length);
    }
    nodes.push(node);
  });
  return { version: 1, branch_point: describe(point), reached: branched, nodes };
}

/** The group row of leaf i's last sample (broken-off segments come first, as in buildScoredGroup). */
function rowOf(leaves: TrajectoryOutcome[], i: number): number {
  let row = 0;
  for (let k = 0; k < i; k++) row += (leaves[k]!.brokenSegments?.length ?? 0) + 1;
  return row + (leaves[i]!.brokenSegments?.length ?? 0);
}
