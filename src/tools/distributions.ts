import { UnknownToolsetError } from "./errors.js";
import type { OpenAIFunctionTool } from "./types.js";
import type { ToolRegistry } from "./registry.js";
import { Toolsets, type ToolsetSelection } from "./toolsets.js";

/**
 * Toolset distributions (Hermes style): each toolset is included with its own probability,
 * in percent, independently of the others. Sampled once per group, so every trajectory of
 * a group sees the same tools and their scores compare like with like.
 */
export interface ToolsetDistribution {
  description: string;
  /** Toolset name → probability of inclusion in percent (0..100). */
  toolsets: Readonly<Record<string, number>>;
}

export const BUILTIN_DISTRIBUTIONS: Readonly<Record<string, ToolsetDistribution>> = {
  default: { description: "The default toolset, always.", toolsets: { default: 100 } },
  terminal_tasks: {
    description: "Shell work: always a terminal, usually file tools, sometimes a persistent session.",
    toolsets: { terminal: 100, filesystem: 80, stateful: 30 },
  },
  stateful_tasks: {
    description: "Interactive work: always the persistent session, often file tools.",
    toolsets: { stateful: 100, filesystem: 60, terminal: 40 },
  },
  mixed: {
    description: "A mix for data generation: usually default, sometimes stateful, rarely everything.",
    toolsets: { default: 80, stateful: 40, full: 10 },
  },
};

/** A random source returning numbers in [0, 1). */
export type Rng = () => number;

/** A small seedable generator (mulberry32) so tests and reruns sample the same toolsets. */
export function seededRng(seed: number): Rng {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/**
 * The toolsets of one draw. Each toolset is kept with its probability; if none was kept,
 * the most probable one is, so a group never gets no tools at all.
 */
export function sampleToolsets(distribution: ToolsetDistribution, rng: Rng = Math.random): string[] {
  const entries = Object.entries(distribution.toolsets);
  for (const [name, p] of entries) {
    if (!Number.isFinite(p) || p < 0 || p > 100) {
      throw new RangeError(`toolset '${name}' has probability ${p}; use a percentage between 0 and 100`);
    }
  }
  const picked = entries.filter(([, p]) => rng() * 100 < p).map(([name]) => name);
  if (picked.length > 0 || entries.length === 0) return picked;
  const best = entries.reduce((a, b) => (b[1] > a[1] ? b : a));
  return [best[0]];
}

export interface GroupToolsOptions extends ToolsetSelection {
  registry: ToolRegistry;
  /** Name of a distribution (built-in or in `distributions`), or the distribution itself. Overrides `enabled`. */
  distribution?: string | ToolsetDistribution | null;
  distributions?: Readonly<Record<string, ToolsetDistribution>>;
  toolsets?: Toolsets;
  rng?: Rng;
  /** Tools offered whatever the toolsets (an env's own tools), after them; names or aliases. */
  alsoOffered?: readonly string[];
}

export interface GroupTools {
  /** The toolsets this group got (sampled, or the enabled list). */
  toolsets: string[];
  /** Canonical names of the tools offered. */
  names: string[];
  /** OpenAI `tools[]` for the chat-completions request. */
  tools: OpenAIFunctionTool[];
}

/** Resolves the tools of one group: call once per group and share the result among its trajectories. */
export function resolveGroupTools(options: GroupToolsOptions): GroupTools {
  const toolsets = options.toolsets ?? new Toolsets();
  let enabled: string[];
  if (options.distribution) {
    const dist = typeof options.distribution === "string" ? lookupDistribution(options.distribution, options.distributions) : options.distribution;
    enabled = sampleToolsets(dist, options.rng);
  } else {
    enabled = [...(options.enabled ?? ["default"])];
  }
  const names = toolsets.resolve({ enabled, disabled: options.disabled ?? null }, options.registry);
  for (const n of options.alsoOffered ?? []) {
    const name = options.registry.get(n).name;
    if (!names.includes(name)) names.push(name);
  }
  return { toolsets: enabled, names, tools: names.length ? options.registry.openAiTools(names) : [] };
}

/** Every toolset a tools config may give a group: its enabled ones, or each one its distribution may draw. */
export function toolsetsInReach(selection: { enabled?: readonly string[] | null; distribution?: string | undefined }, distributions: Readonly<Record<string, ToolsetDistribution>> = {}): string[] {
  if (selection.distribution) return Object.keys(lookupDistribution(selection.distribution, distributions).toolsets);
  return [...(selection.enabled ?? ["default"])];
}

export function lookupDistribution(name: string, extra: Readonly<Record<string, ToolsetDistribution>> = {}): ToolsetDistribution {
  const all = { ...BUILTIN_DISTRIBUTIONS, ...extra };
  const d = all[name];
  if (!d) throw new UnknownToolsetError("distribution", name, Object.keys(all));
  return d;
}
