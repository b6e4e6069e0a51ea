import type { z } from "zod";
import { BUILTIN_TOOLS } from "./builtin.js";
import { defineTool, toOpenAiTool } from "./definition.js";
import { DuplicateToolError, ToolArgumentsError, UnknownToolError } from "./errors.js";
import { stripIsolationArgs, type IsolationArgName } from "./isolation-args.js";
import type { OpenAIFunctionTool, ToolDefinition } from "./types.js";

/** A call whose tool was found and whose arguments passed its schema. */
export interface ValidatedCall {
  tool: ToolDefinition;
  /** Parsed arguments (defaults applied, unknown keys of object schemas dropped, no isolation arguments). */
  args: Record<string, unknown>;
  /** Isolation arguments the caller tried to set; removed, never honoured. */
  strippedIsolationArgs: IsolationArgName[];
}

export type CheckedCall = ({ ok: true } & ValidatedCall) | { ok: false; error: UnknownToolError | ToolArgumentsError };

/**
 * The tools an executor or agent knows, by name and by alias. Resolution is exact (case
 * sensitive), as OpenAI function names are.
 */
export class ToolRegistry {
  private readonly byName = new Map<string, ToolDefinition>();
  private readonly byAlias = new Map<string, ToolDefinition>();

  constructor(tools: Iterable<ToolDefinition> = []) {
    for (const t of tools) this.register(t);
  }

  /** A registry holding the built-in sandbox tools (bash, bash_stateful, tmux, read_file, write_file) plus `extra`. */
  static withBuiltins(extra: Iterable<ToolDefinition> = []): ToolRegistry {
    const reg = new ToolRegistry(BUILTIN_TOOLS);
    for (const t of extra) reg.register(t);
    return reg;
  }

  register(def: ToolDefinition): this {
    defineTool(def);
    for (const name of [def.name, ...(def.aliases ?? [])]) {
      const taken = this.byName.get(name) ?? this.byAlias.get(name);
      if (taken) throw new DuplicateToolError(`tool name '${name}' is already used by tool '${taken.name}'`);
    }
    this.byName.set(def.name, def);
    for (const alias of def.aliases ?? []) this.byAlias.set(alias, def);
    return this;
  }

  /** Removes this very definition (names and aliases); false when it is not registered here. */
  unregister(def: ToolDefinition): boolean {
    if (this.byName.get(def.name) !== def) return false;
    this.byName.delete(def.name);
    for (const alias of def.aliases ?? []) if (this.byAlias.get(alias) === def) this.byAlias.delete(alias);
    return true;
  }

  /** The tool with this name or alias, or undefined. */
  resolve(name: string): ToolDefinition | undefined {
    return this.byName.get(name) ?? this.byAlias.get(name);
  }

  /** The tool with this name or alias; UnknownToolError (listing the known tools) otherwise. */
  get(name: string): ToolDefinition {
    const def = this.resolve(name);
    if (!def) throw new UnknownToolError(name, this.names());
    return def;
  }

  has(name: string): boolean {
    return this.resolve(name) !== undefined;
  }

  /** Canonical names, in registration order. */
  names(): string[] {
    return [...this.byName.keys()];
  }

  list(): ToolDefinition[] {
    return [...this.byName.values()];
  }

  /** A registry with only these tools (names or aliases). Throws UnknownToolError for a name it lacks. */
  subset(names: Iterable<string>): ToolRegistry {
    const picked = new Set<ToolDefinition>();
    for (const n of names) picked.add(this.get(n));
    return new ToolRegistry(this.list().filter((t) => picked.has(t)));
  }

  /** OpenAI `tools[]` for the chat-completions request: all tools, or only the named ones. */
  openAiTools(names?: Iterable<string>): OpenAIFunctionTool[] {
    const defs = names ? this.subset(names).list() : this.list();
    return defs.map(toOpenAiTool);
  }

  /** Resolves the tool and validates the arguments; throws UnknownToolError or ToolArgumentsError. */
  validate(name: string, args: Record<string, unknown> | undefined): ValidatedCall {
    const checked = this.check(name, args);
    if (!checked.ok) throw checked.error;
    return { tool: checked.tool, args: checked.args, strippedIsolationArgs: checked.strippedIsolationArgs };
  }

  /** Like `validate`, but returns the error instead of throwing (the executor's hot path). */
  check(name: string, args: Record<string, unknown> | undefined): CheckedCall {
    const tool = this.resolve(name);
    if (!tool) return { ok: false, error: new UnknownToolError(name, this.names()) };
    const { args: clean, stripped } = stripIsolationArgs(args ?? {});
    const parsed = (tool.parameters as z.ZodType).safeParse(clean);
    if (!parsed.success) {
      const problems = parsed.error.issues.map((i) => `${i.path.length ? i.path.join(".") : "(arguments)"}: ${i.message}`);
      return { ok: false, error: new ToolArgumentsError(tool.name, problems) };
    }
    const data = parsed.data;
    const out = data !== null && typeof data === "object" && !Array.isArray(data) ? (data as Record<string, unknown>) : clean;
    return { ok: true, tool, args: out, strippedIsolationArgs: stripped };
  }
}
