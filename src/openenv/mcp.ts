import { Server } from "@modelcontextprotocol/sdk/server/index.js";
import type { Transport } from "@modelcontextprotocol/sdk/shared/transport.js";
import { CallToolRequestSchema, ListToolsRequestSchema, type CallToolResult, type JSONRPCMessage } from "@modelcontextprotocol/sdk/types.js";
import { formatToolResultForModel } from "../agent/agent-loop.js";
import type { ListedTool, ToolStep } from "./episode.js";
import { EpisodeInfraError, OpenEnvError } from "./errors.js";

/** What an MCP server of a slot answers from: the tool list and a call in the session's episode. */
export interface McpBinding {
  listTools(): ListedTool[];
  /** Runs the call in the session's episode; throws an Error whose message the client reads. */
  callTool(name: string, args: Record<string, unknown>): Promise<ToolStep>;
}

/**
 * An MCP server (the SDK's own `Server`) over one session's episode: `tools/list` gives the
 * env's tools with their JSON Schemas from the tool table, `tools/call` runs one in the
 * episode's slot. The same server serves the streamable HTTP transport at /mcp and the
 * `{"type":"mcp"}` messages of a WebSocket session.
 */
export function createMcpServer(name: string, binding: McpBinding): Server {
  const server = new Server({ name: `slotpool-openenv:${name}`, version: "1" }, { capabilities: { tools: {} } });
  server.setRequestHandler(ListToolsRequestSchema, () => ({
    tools: binding.listTools().map((t) => ({ name: t.name, description: t.description, inputSchema: { type: "object" as const, ...t.input_schema } })),
  }));
  server.setRequestHandler(CallToolRequestSchema, async (request): Promise<CallToolResult> => {
    let step: ToolStep;
    try {
      step = await binding.callTool(request.params.name, (request.params.arguments ?? {}) as Record<string, unknown>);
    } catch (err) {
      // An MCP tool error the client's model can read; the session lives on. The structured
      // content carries OpenEnv's error code (and the infra failure's cause) for programs.
      const facts = err instanceof OpenEnvError ? { code: err.wireCode, ...(err instanceof EpisodeInfraError ? { infra_failure: true, cause: err.failure } : {}) } : { code: "EXECUTION_ERROR" };
      return { content: [{ type: "text", text: (err as Error).message }], structuredContent: { ...facts, reward: null }, isError: true };
    }
    return mcpToolResult(step);
  });
  return server;
}

/** A step as an MCP tool result: what the model reads as text, the facts as structured content. */
export function mcpToolResult(step: ToolStep): CallToolResult {
  const exit = step.result.metadata["exit_code"];
  return {
    content: [{ type: "text", text: step.error ? step.error.message : formatToolResultForModel(step.result) }],
    structuredContent: {
      output: step.result.output,
      success: step.result.success,
      ...(typeof exit === "number" ? { exit_code: exit } : {}),
      ...(step.result.error ? { error: step.result.error } : {}),
      done: step.done,
      reward: step.reward,
      ...(step.done ? { metadata: step.metadata } : {}),
    },
    isError: !step.result.success,
  };
}

/**
 * An in-process MCP transport: `request(message)` hands one JSON-RPC message to the server
 * and resolves with its answer. Used where the MCP messages arrive inside another protocol
 * (a WebSocket frame, OpenEnv's plain JSON-RPC POST), so the SDK's server handles them too.
 */
export class DirectTransport implements Transport {
  onmessage?: Transport["onmessage"];
  onclose?: () => void;
  onerror?: (error: Error) => void;
  private readonly waiting = new Map<string | number, (answer: JSONRPCMessage) => void>();

  async start(): Promise<void> {}

  async close(): Promise<void> {
    this.onclose?.();
  }

  async send(message: JSONRPCMessage): Promise<void> {
    if (!("id" in message) || message.id === undefined || "method" in message) return; // notifications and server requests: nowhere to go
    const resolve = this.waiting.get(message.id);
    this.waiting.delete(message.id);
    resolve?.(message);
  }

  /** The server's answer to a request; null for a notification (it has none). */
  request(message: JSONRPCMessage): Promise<JSONRPCMessage | null> {
    if (!("id" in message) || message.id === undefined) {
      this.onmessage?.(message);
      return Promise.resolve(null);
    }
    const id = message.id;
    return new Promise((resolve) => {
      this.waiting.set(id, resolve);
      this.onmessage?.(message);
    });
  }
}
