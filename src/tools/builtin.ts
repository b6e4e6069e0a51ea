import { z } from "zod";
import { defineTool } from "./definition.js";
import type { ToolDefinition } from "./types.js";

/**
 * The sandbox tools every sandbox server offers. Parameter schemas are the model-facing
 * subset of the wire schemas in `protocol/sandbox.ts` (no isolation arguments), with
 * descriptions the model reads.
 */

const timeoutSeconds = z
  .number()
  .positive()
  .optional()
  .describe("Seconds before the command is killed (clamped to 1..600; default set by the environment).");

export const bashTool = defineTool({
  name: "bash",
  description:
    "Run a shell command in your workspace (/workspace) and return its output and exit code. " +
    "Each call starts a fresh shell; files persist between calls.",
  parameters: z.object({
    command: z.string().min(1, "command must not be empty").describe("The shell command to run."),
    timeout: timeoutSeconds,
  }),
  kind: "sandbox",
  aliases: ["terminal"],
});

export const bashStatefulTool = defineTool({
  name: "bash_stateful",
  description:
    "Run a command in your persistent shell session: the working directory, environment variables " +
    "and background processes carry over from one call to the next.",
  parameters: z.object({
    command: z.string().min(1, "command must not be empty").describe("The shell command to run."),
    timeout: timeoutSeconds,
  }),
  kind: "sandbox",
  aliases: ["terminal_stateful"],
});

export const tmuxTool = defineTool({
  name: "tmux",
  description:
    "Drive an interactive terminal session: start it, send keys, capture the screen, or stop it. " +
    "Use it for programs that need a terminal (editors, REPLs, long-running servers).",
  parameters: z.object({
    action: z.enum(["start", "send_keys", "capture", "stop"]).describe("What to do with the session."),
    keys: z.string().optional().describe("send_keys: the keys to type."),
    enter: z.boolean().optional().describe("send_keys: press Enter after the keys (default true)."),
    lines: z.number().int().positive().optional().describe("capture: how many lines of scrollback to include."),
  }),
  kind: "sandbox",
});

export const readFileTool = defineTool({
  name: "read_file",
  description: "Read a file from your workspace. Relative paths are relative to /workspace.",
  parameters: z.object({
    path: z.string().min(1, "path must not be empty").describe("The file to read."),
    max_bytes: z.number().int().positive().optional().describe("Read at most this many bytes."),
    encoding: z.enum(["text", "base64"]).optional().describe("base64 for binary files; default text."),
  }),
  kind: "sandbox",
});

export const writeFileTool = defineTool({
  name: "write_file",
  description: "Create or overwrite a file in your workspace; parent directories are created as needed.",
  parameters: z.object({
    path: z.string().min(1, "path must not be empty").describe("The file to write."),
    content: z.string().describe("The file's new content."),
    encoding: z.enum(["text", "base64"]).optional().describe("base64 when content is base64-encoded bytes; default text."),
  }),
  kind: "sandbox",
});

/** Every built-in sandbox tool, in the order they are offered to a model. */
export const BUILTIN_TOOLS: readonly ToolDefinition[] = [bashTool, bashStatefulTool, tmuxTool, readFileTool, writeFileTool];
