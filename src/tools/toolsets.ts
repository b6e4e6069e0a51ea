import { UnknownToolError, UnknownToolsetError } from "./errors.js";
import type { ToolRegistry } from "./registry.js";
import { BROWSER_TOOL_NAMES } from "../protocol/browser-tools.js";

/**
 * Toolsets: named groups of tools offered to the model together (Hermes style). An env
 * enables some and disables others; the union of the enabled ones minus the disabled ones
 * is what the model sees.
 */
export interface ToolsetDefinition {
  description: string;
  /** Tool names (or aliases), or "*" for every tool in the registry. */
  tools: readonly string[];
  /** Other toolsets whose tools this one contains too. */
  includes?: readonly string[];
}

export const ALL_TOOLS = "*";

export const BUILTIN_TOOLSETS: Readonly<Record<string, ToolsetDefinition>> = {
  default: { description: "Run commands and read and write files.", tools: ["bash", "read_file", "write_file"] },
  terminal: { description: "Run commands, one fresh shell per call.", tools: ["bash"] },
  stateful: { description: "A persistent shell session and an interactive terminal.", tools: ["bash_stateful", "tmux"] },
  filesystem: { description: "Read and write files.", tools: ["read_file", "write_file"] },
  // The seed's browser toolset (less its web_search, which slotpool has no backend for): docs/browser.md.
  browser: { description: "A browser in your workspace: open pages, read them as text, click, type, scroll.", tools: [...BROWSER_TOOL_NAMES] },
  full: { description: "Every registered tool, sandbox and external.", tools: [ALL_TOOLS] },
};

export interface ToolsetSelection {
  /** Toolsets to enable; default ["default"]. */
  enabled?: readonly string[] | null;
  /** Toolsets whose tools are removed after enabling. */
  disabled?: readonly string[] | null;
}

/** The built-in toolsets plus user-defined ones (which may replace a built-in). */
export class Toolsets {
  private readonly sets = new Map<string, ToolsetDefinition>(Object.entries(BUILTIN_TOOLSETS));

  constructor(custom: Record<string, ToolsetDefinition | readonly string[]> = {}) {
    for (const [name, def] of Object.entries(custom)) this.define(name, def);
  }

  define(name: string, def: ToolsetDefinition | readonly string[]): this {
    if (!name.trim()) throw new UnknownToolsetError("toolset", name, this.names());
    const d: ToolsetDefinition = isToolList(def) ? { description: `user toolset ${name}`, tools: def } : def;
    this.sets.set(name, d);
    return this;
  }

  has(name: string): boolean {
    return this.sets.has(name);
  }

  names(): string[] {
    return [...this.sets.keys()];
  }

  get(name: string): ToolsetDefinition {
    const def = this.sets.get(name);
    if (!def) throw new UnknownToolsetError("toolset", name, this.names());
    return def;
  }

  /** Canonical tool names of one toolset against a registry (includes followed, cycles ignored). */
  toolsOf(name: string, registry: ToolRegistry, seen: Set<string> = new Set()): string[] {
    if (seen.has(name)) return [];
    seen.add(name);
    const def = this.get(name);
    const out: string[] = [];
    for (const t of def.tools) {
      if (t === ALL_TOOLS) {
        out.push(...registry.names());
        continue;
      }
      const tool = registry.resolve(t);
      if (!tool) {
        throw new UnknownToolError(t, registry.names());
      }
      out.push(tool.name);
    }
    for (const inc of def.includes ?? []) out.push(...this.toolsOf(inc, registry, seen));
    return [...new Set(out)];
  }

  /** Canonical tool names for an enabled/disabled selection, in registry order. */
  resolve(selection: ToolsetSelection, registry: ToolRegistry): string[] {
    const enabled = selection.enabled ?? ["default"];
    const on = new Set<string>();
    for (const s of enabled) for (const t of this.toolsOf(s, registry)) on.add(t);
    for (const s of selection.disabled ?? []) for (const t of this.toolsOf(s, registry)) on.delete(t);
    return registry.names().filter((n) => on.has(n));
  }
}

function isToolList(def: ToolsetDefinition | readonly string[]): def is readonly string[] {
  return Array.isArray(def);
}
