import { INFRA_MARKER } from "../protocol/infra.js";
import { SCREENSHOT_METADATA_KEY } from "../protocol/browser-tools.js";
import type { ToolResult } from "../protocol/tool.js";
import type { BrowserToolsConfig, VisionModelConfig } from "./config.js";

/**
 * What the executor adds to a browser tool's answer from the slot (docs/browser.md): the env's
 * bound on a snapshot's length, and `browser_vision`'s analysis by the env's vision model (the
 * sandbox server has no model and no credentials: it only takes the screenshot).
 *
 * The screenshot never reaches the transcript: it is handed to the vision model and dropped.
 * Without a vision model the answer is a failed result saying so (the agent asked for a tool
 * the env did not equip); a vision model that cannot be asked or fails is the infrastructure's
 * (`vision_model`), like a model server that is down.
 */

/** The seed's note where a snapshot was cut. */
const TRUNCATED = "\n\n[... content truncated ...]";

/** The seed's prompt around the model's question. */
function visionPrompt(question: string): string {
  return `You are analyzing a screenshot of a web browser.

User's question: ${question}

Provide a detailed and helpful answer based on what you see in the screenshot.
If there are interactive elements, describe them. If there are verification challenges
or CAPTCHAs, describe what type they are and what action might be needed.

Focus on answering the user's specific question.`;
}

export class BrowserResults {
  constructor(private readonly config: BrowserToolsConfig) {}

  /** Whether `tool`'s answers pass through here. */
  handles(tool: string): boolean {
    return tool === "browser_snapshot" || tool === "browser_vision";
  }

  async finish(tool: string, result: ToolResult, signal?: AbortSignal): Promise<ToolResult> {
    if (tool === "browser_snapshot") return this.bounded(result);
    if (tool === "browser_vision") return this.analysed(result, signal);
    return result;
  }

  /** A snapshot cut at `snapshotMaxChars` (the url/title header counts), with the seed's note and `metadata.truncated`. */
  private bounded(result: ToolResult): ToolResult {
    const max = this.config.snapshotMaxChars;
    if (!result.success || result.output.length <= max) return result;
    return { ...result, output: result.output.slice(0, max) + TRUNCATED, metadata: { ...result.metadata, truncated: true, snapshot_chars: result.output.length } };
  }

  private async analysed(result: ToolResult, signal: AbortSignal | undefined): Promise<ToolResult> {
    const { [SCREENSHOT_METADATA_KEY]: shot, ...metadata } = result.metadata;
    if (!result.success || typeof shot !== "string") return { ...result, metadata };
    const vision = this.config.vision;
    if (!vision) {
      return {
        ...result,
        success: false,
        output: "",
        error: "no vision model configured: browser_vision needs the env's executor.browser.vision (an OpenAI-compatible model that reads images); use browser_snapshot to read the page as text",
        metadata: { ...metadata, browser_error: "no_vision_model" },
      };
    }
    const question = typeof metadata["question"] === "string" ? metadata["question"] : "";
    try {
      const analysis = await askVisionModel(vision, visionPrompt(question), shot, signal);
      return { ...result, output: analysis, metadata: { ...metadata, analysis, vision_model: vision.name } };
    } catch (err) {
      return {
        ...result,
        success: false,
        output: "",
        error: `the vision model ${vision.name} could not analyse the screenshot: ${err instanceof Error ? err.message : String(err)}`,
        metadata: { ...metadata, vision_model: vision.name, [INFRA_MARKER]: "vision_model" },
      };
    }
  }
}

/** One chat completion with the screenshot as an image content part (the seed's request); the answer's text. */
async function askVisionModel(vision: VisionModelConfig, prompt: string, imageUrl: string, signal: AbortSignal | undefined): Promise<string> {
  const key = process.env[vision.apiKeyEnv];
  const timeout = AbortSignal.timeout(vision.timeoutMs);
  const res = await fetch(`${vision.url.replace(/\/+$/, "")}/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json", ...(key ? { authorization: `Bearer ${key}` } : {}) },
    body: JSON.stringify({
      model: vision.name,
      messages: [{ role: "user", content: [{ type: "text", text: prompt }, { type: "image_url", image_url: { url: imageUrl } }] }],
      max_tokens: vision.maxTokens,
      temperature: 0.1,
    }),
    signal: signal ? AbortSignal.any([signal, timeout]) : timeout,
  }).catch((err: unknown) => {
    throw new Error(timeout.aborted ? `no answer within ${vision.timeoutMs} ms` : `unreachable (${err instanceof Error ? err.message : String(err)})`);
  });
  const text = await res.text();
  if (!res.ok) throw new Error(`HTTP ${res.status}: ${text.slice(0, 200)}`);
  let content: unknown;
  try {
    content = (JSON.parse(text) as { choices?: Array<{ message?: { content?: unknown } }> }).choices?.[0]?.message?.content;
  } catch {
    throw new Error(`an answer that is not JSON: ${text.slice(0, 200)}`);
  }
  if (typeof content !== "string" || content === "") throw new Error("an answer without text (choices[0].message.content)");
  return content;
}
