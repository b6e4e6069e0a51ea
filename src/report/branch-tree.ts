/**
 * The tree of a branching group (docs/fork.md), as the `slotpool.tree` key of a JSONL line:
 * one root node (the shared prefix, generated once) and one node per branch, each holding
 * only the segment it adds. A trainer can use the prefix once and per-branch advantages;
 * the group's rows still hold every branch's full sequence, so Atropos gets valid groups.
 *
 *   {"slotpool": {"tree": {"version": 1, "branch_point": "after turn 2", "nodes": [
 *      {"id": "root", "parent": null, "turns": [1, 2], "messages": [0, 5], "tokens": […], "masks": […]},
 *      {"id": "b0", "parent": "root", "row": 0, "trajectory_id": "…", "turns": [3, 4], "messages": [5, 9], "tokens": […], "masks": […], "score": 1}, …]}}}
 */
export interface BranchNode {
  id: string;
  parent: string | null;
  /** The row of the group (index into scores/tokens) a leaf is. */
  row?: number;
  trajectory_id?: string;
  /** First and last turn of the segment (inclusive; [n, n-1] when it adds no turn). */
  turns: [number, number];
  /** The segment's messages: [from, to) in the leaf's conversation. */
  messages: [number, number];
  /** The ids this node adds after its parent's (the root: the whole prefix), with their masks; absent without token ids. */
  tokens?: number[];
  masks?: number[];
  /** Model tokens generated in this segment (completions). */
  completion_tokens?: number;
  score?: number;
}

export interface BranchTree {
  version: 1;
  /** How the branch point was chosen, e.g. "after turn 2" or "after the 1st read_file call". */
  branch_point: string;
  /** Whether the root reached the branch point (else it finished first and every branch is its copy). */
  reached: boolean;
  nodes: BranchNode[];
}

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);

/** The tree of a line, read tolerantly (undefined when absent or malformed). */
export function readBranchTree(line: Record<string, unknown>): BranchTree | undefined {
  const raw = isObject(line["slotpool"]) ? line["slotpool"]["tree"] : undefined;
  if (!isObject(raw) || !Array.isArray(raw["nodes"])) return undefined;
  const nodes: BranchNode[] = [];
  for (const n of raw["nodes"]) {
    if (!isObject(n) || typeof n["id"] !== "string") return undefined;
    const pair = (v: unknown): [number, number] => (Array.isArray(v) && v.length === 2 ? [Number(v[0]), Number(v[1])] : [0, 0]);
    const node: BranchNode = { id: n["id"], parent: typeof n["parent"] === "string" ? n["parent"] : null, turns: pair(n["turns"]), messages: pair(n["messages"]) };
    if (typeof n["row"] === "number") node.row = n["row"];
    if (typeof n["trajectory_id"] === "string") node.trajectory_id = n["trajectory_id"];
    if (Array.isArray(n["tokens"])) node.tokens = n["tokens"].map(Number);
    if (typeof n["completion_tokens"] === "number") node.completion_tokens = n["completion_tokens"];
    if (typeof n["score"] === "number") node.score = n["score"];
    nodes.push(node);
  }
  return { version: 1, branch_point: String(raw["branch_point"] ?? ""), reached: raw["reached"] !== false, nodes };
}

/** The tree as text lines (the report shows them in a <pre>): root, then each branch with its turns, tokens and score. */
export function drawBranchTree(tree: BranchTree): string[] {
  const describe = (n: BranchNode): string => {
    const turns = n.turns[1] >= n.turns[0] ? `turns ${n.turns[0]}–${n.turns[1]}` : "no turns";
    const toks = n.tokens ? `, ${n.tokens.length} ids` : "";
    const gen = n.completion_tokens !== undefined ? `, ${n.completion_tokens} generated` : "";
    const score = n.score !== undefined ? `, score ${n.score}` : "";
    const row = n.row !== undefined ? ` (row ${n.row})` : "";
    return `${n.id}${row}: ${turns}, messages ${n.messages[0]}–${n.messages[1] - 1}${toks}${gen}${score}`;
  };
  const lines: string[] = [];
  const walk = (id: string | null, prefix: string): void => {
    const kids = tree.nodes.filter((n) => n.parent === id);
    kids.forEach((n, i) => {
      const last = i === kids.length - 1;
      lines.push(id === null ? describe(n) : `${prefix}${last ? "└─ " : "├─ "}${describe(n)}`);
      walk(n.id, id === null ? "" : prefix + (last ? "   " : "│  "));
    });
  };
  walk(null, "");
  lines.unshift(`branching group: forked ${tree.branch_point}${tree.reached ? "" : " (not reached: the prefix finished first)"}`);
  return lines;
}
