import { Agent, request, type Dispatcher } from "undici";
import { z } from "zod";
import { ToolResultSchema, type ParsedToolCall, type ToolResult } from "../protocol/tool.js";
import type { OpenAIFunctionTool } from "../tools/types.js";
import { SlotpoolError } from "../protocol/errors.js";

/**
 * Client of a ToolServer (external tools whose credentials live in that process). The
 * executor sends each external call here with the trajectory's id and slot, so a tool can
 * reach into the trajectory's workspace if it needs to.
 */

export class ToolServerError extends SlotpoolError {
  override name = "ToolServerError";
  constructor(
    message: string,
    readonly status?: number,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

export interface ToolServerCall {
  trajectoryId?: string;
  call: ParsedToolCall;
  timeoutS?: number;
  slotId?: string;
  containerAddr?: string;
  signal?: AbortSignal;
}

const ToolsListSchema = z.object({
  tools: z.array(
    z.object({
      type: z.literal("function"),
      function: z.object({ name: z.string(), description: z.string().default(""), parameters: z.record(z.string(), z.unknown()).default({}) }),
    }),
  ),
});

export class ToolServerClient {
  private readonly base: string;
  private readonly dispatcher: Dispatcher;

  constructor(
    url: string,
    private readonly token?: string,
  ) {
    this.base = url.replace(/\/+$/, "");
    this.dispatcher = new Agent({ keepAliveTimeout: 30_000, connections: 64 });
  }

  get url(): string {
    return this.base;
  }

  async execute(c: ToolServerCall): Promise<ToolResult> {
    const body = {
      trajectory_id: c.trajectoryId,
      tool: { name: c.call.name, arguments: c.call.arguments, uniq_id: c.call.uniq_id },
      timeout_s: c.timeoutS,
      slot_id: c.slotId,
      container_addr: c.containerAddr,
    };
    // The ToolServer enforces timeout_s itself; our deadline leaves it room to answer.
    const deadlineMs = ((c.timeoutS ?? 600) + 10) * 1000;
    const data = await this.call("POST", "/execute", body, deadlineMs, c.signal);
    const parsed = ToolResultSchema.safeParse(data);
    if (!parsed.success) throw new ToolServerError(`ToolServer ${this.base} answered /execute with a body that is not a tool result: ${parsed.error.issues[0]?.message}`);
    return parsed.data;
  }

  async listTools(): Promise<OpenAIFunctionTool[]> {
    const data = await this.call("GET", "/tools", undefined, 10_000);
    const parsed = ToolsListSchema.safeParse(data);
    if (!parsed.success) throw new ToolServerError(`ToolServer ${this.base} answered /tools with an unexpected body: ${parsed.error.issues[0]?.message}`);
    return parsed.data.tools;
  }

  async close(): Promise<void> {
    await this.dispatcher.close();
  }

  private async call(method: "GET" | "POST", path: string, body: unknown, deadlineMs: number, signal?: AbortSignal): Promise<unknown> {
    const headers: Record<string, string> = { "content-type": "application/json" };
    if (this.token) headers["authorization"] = `Bearer ${this.token}`;
    let res: Dispatcher.ResponseData;
    try {
      res = await request(`${this.base}${path}`, {
        method,
        headers,
        body: body === undefined ? undefined : JSON.stringify(body),
        dispatcher: this.dispatcher,
        headersTimeout: deadlineMs,
        bodyTimeout: deadlineMs,
        signal,
      });
    } catch (err) {
      throw new ToolServerError(`cannot reach the ToolServer at ${this.base}: ${(err as Error).message}`, undefined, { cause: err });
    }
    const text = await res.body.text();
    if (res.statusCode === 401 || res.statusCode === 403) {
      throw new ToolServerError(`the ToolServer at ${this.base} refused our token (HTTP ${res.statusCode}); check the tool server token`, res.statusCode);
    }
    let data: unknown;
    try {
      data = text ? JSON.parse(text) : undefined;
    } catch {
      throw new ToolServerError(`the ToolServer at ${this.base} answered ${path} with non-JSON (HTTP ${res.statusCode})`, res.statusCode);
    }
    if (res.statusCode >= 400) {
      const msg = data && typeof data === "object" && "error" in data ? String((data as { error: unknown }).error) : text.slice(0, 200);
      throw new ToolServerError(`the ToolServer at ${this.base} answered ${path} with HTTP ${res.statusCode}: ${msg}`, res.statusCode);
    }
    return data;
  }
}
