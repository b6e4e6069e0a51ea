import { z } from "zod";
import { NO_NUL, SlotPathSchema } from "./sandbox.js";
import { BROWSER_TOOL_SPECS, type BrowserToolName } from "./browser-tools.js";

/**
 * The tool table: every built-in sandbox tool once, with its name, aliases, argument schema,
 * description and isolation arguments. Everything else is derived from it:
 *  - the model-facing schemas (OpenAI `tools[]`, the Hermes prompt): `src/tools/builtin.ts`;
 *  - the executor's routing and the isolation arguments it stamps on a call: `src/executor/tool-executor.ts`;
 *  - the sandbox server's dispatch and argument check: `src/sandbox/service/service.ts`.
 * Env-defined tools are added beside these in a ToolRegistry (docs/tools.md).
 */

/**
 * Isolation arguments decide how much a sandbox command may do (network, fail-closed
 * isolation). They come from env/executor config only: a model that writes them into its
 * tool call must not be able to loosen its isolation, so they are removed from every call and
 * filled by the executor from its config.
 */
export const ISOLATION_ARG_NAMES = ["allow_network", "require_sandbox", "require_stateful_sandbox"] as const;
export type IsolationArgName = (typeof ISOLATION_ARG_NAMES)[number];

/** The isolation arguments on the wire (every sandbox tool accepts them; each entry says which it honours). */
export const IsolationArgsSchema = z.object({
  allow_network: z.boolean().optional(),
  require_sandbox: z.boolean().optional(),
  require_stateful_sandbox: z.boolean().optional(),
});
export type IsolationArgs = z.infer<typeof IsolationArgsSchema>;

/** One tool of the table. */
export interface ToolTableEntry<S extends z.ZodObject = z.ZodObject> {
  /** The canonical name: what the executor sends to the server and the model is offered. */
  name: string;
  /** Other names accepted for it (Hermes: terminal → bash); resolved once, at the entry. */
  aliases: readonly string[];
  /** What the model reads about the tool. */
  description: string;
  /** The arguments on the wire: the model's (with descriptions) plus the isolation arguments. */
  args: S;
  /** The isolation arguments this tool honours: stripped from the model's call, filled by the executor. */
  isolationArgs: readonly IsolationArgName[];
  /** The argument holding the call's time limit in seconds (the executor clamps it to its bounds, at most 1..600), if the tool has one. */
  timeoutArg?: string;
}

const timeoutSeconds = z
  .number()
  .positive()
  .optional()
  .describe("Seconds before the command is killed (clamped to the environment's limits, within 1..600; default set by the environment).");

const command = NO_NUL("command").min(1, "command must not be empty").describe("The shell command to run.");

const encoding = (what: string) => z.enum(["text", "base64"]).optional().describe(what);

export const BashArgsSchema = IsolationArgsSchema.extend({ command, timeout: timeoutSeconds });
export const BashStatefulArgsSchema = BashArgsSchema;
export const TmuxArgsSchema = IsolationArgsSchema.extend({
  action: z.enum(["start", "send_keys", "capture", "stop"]).describe("What to do with the session."),
  keys: NO_NUL("keys").optional().describe("send_keys: the keys to type."),
  enter: z.boolean().optional().describe("send_keys: press Enter after the keys (default true)."),
  lines: z.number().int().positive().optional().describe("capture: how many lines of scrollback to include."),
});
export const ReadFileArgsSchema = IsolationArgsSchema.extend({
  path: SlotPathSchema.describe("The file to read."),
  max_bytes: z.number().int().positive().optional().describe("Read at most this many bytes."),
  encoding: encoding("base64 for binary files; default text."),
});
export type ReadFileArgs = z.infer<typeof ReadFileArgsSchema>;
export const WriteFileArgsSchema = IsolationArgsSchema.extend({
  path: SlotPathSchema.describe("The file to write."),
  content: z.string().describe("The file's new content."),
  encoding: encoding("base64 when content is base64-encoded bytes; default text."),
});
export type WriteFileArgs = z.infer<typeof WriteFileArgsSchema>;

const SHELL_POLICY = ["allow_network", "require_sandbox"] as const;
/** A browser always runs sandboxed (there is no unsandboxed browser to require against); its network is the slot's. */
const BROWSER_POLICY = ["allow_network"] as const;

/** A browser tool's entry, from its spec (browser-tools.ts): the seed's arguments plus the isolation arguments. */
function browserEntry<N extends BrowserToolName>(name: N) {
  const spec = BROWSER_TOOL_SPECS[name];
  return { name, aliases: [] as const, description: spec.description, args: IsolationArgsSchema.extend(spec.args.shape), isolationArgs: BROWSER_POLICY } as const;
}
const STATEFUL_POLICY = ["allow_network", "require_sandbox", "require_stateful_sandbox"] as const;

/** The built-in tools, in the order they are offered to a model. */
export const TOOL_TABLE = [
  {
    name: "bash",
    aliases: ["terminal"],
    description:
      "Run a shell command in your workspace (/workspace) and return its output and exit code. " +
      "Each call starts a fresh shell; files persist between calls.",
    args: BashArgsSchema,
    isolationArgs: SHELL_POLICY,
    timeoutArg: "timeout",
  },
  {
    name: "bash_stateful",
    aliases: ["terminal_stateful"],
    description:
      "Run a command in your persistent shell session: the working directory, environment variables " +
      "and background processes carry over from one call to the next.",
    args: BashStatefulArgsSchema,
    isolationArgs: STATEFUL_POLICY,
    timeoutArg: "timeout",
  },
  {
    name: "tmux",
    aliases: [],
    description:
      "Drive an interactive terminal session: start it, send keys, capture the screen, or stop it. " +
      "Use it for programs that need a terminal (editors, REPLs, long-running servers).",
    args: TmuxArgsSchema,
    isolationArgs: STATEFUL_POLICY,
  },
  {
    name: "read_file",
    aliases: [],
    description: "Read a file from your workspace. Relative paths are relative to /workspace.",
    args: ReadFileArgsSchema,
    isolationArgs: [],
  },
  {
    name: "write_file",
    aliases: [],
    description: "Create or overwrite a file in your workspace; parent directories are created as needed.",
    args: WriteFileArgsSchema,
    isolationArgs: [],
  },
  // The browser (offered by the `browser` toolset only): one Chromium per slot, docs/browser.md.
  browserEntry("browser_navigate"),
  browserEntry("browser_snapshot"),
  browserEntry("browser_click"),
  browserEntry("browser_type"),
  browserEntry("browser_scroll"),
  browserEntry("browser_back"),
  browserEntry("browser_press"),
  browserEntry("browser_close"),
  browserEntry("browser_get_images"),
  browserEntry("browser_vision"),
] as const satisfies readonly ToolTableEntry[];

export type BuiltinToolName = (typeof TOOL_TABLE)[number]["name"];
/** Kept for the wire's older readers: the canonical names of the built-in tools. */
export const SANDBOX_TOOLS: readonly BuiltinToolName[] = TOOL_TABLE.map((t) => t.name);
export type SandboxToolName = BuiltinToolName;

const BY_NAME: ReadonlyMap<string, ToolTableEntry> = new Map(TOOL_TABLE.flatMap((t) => [t.name, ...t.aliases].map((n) => [n, t as ToolTableEntry] as const)));

/** The built-in tool with this name or alias, or undefined (names are exact, as OpenAI's are). */
export function builtinTool(nameOrAlias: string): (ToolTableEntry & { name: BuiltinToolName }) | undefined {
  return BY_NAME.get(nameOrAlias) as (ToolTableEntry & { name: BuiltinToolName }) | undefined;
}

/** Every name and alias the built-in tools claim (an env's own tool may use none of them). */
export function builtinToolNames(): string[] {
  return [...BY_NAME.keys()];
}
