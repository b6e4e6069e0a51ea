import type { ToolResult } from "../protocol/tool.js";
import { ToolContextError } from "./errors.js";

/**
 * The browser helpers of a ToolContext (the seed's `ctx.browser_navigate`, `ctx.browser_snapshot`,
 * plus one per browser tool): the same browser the model used in the trajectory's slot, its
 * page, cookies and form state as the model left them (docs/browser.md).
 *
 * Like the ToolContext's other methods each one does what it says or throws: `ToolContextError`
 * when the browser refused (a stale ref, a navigation that failed), `ToolContextInfraError`
 * (from `callTool`) when the infrastructure did not let the call run. What the agent did is a
 * result: a page the agent never opened (or that crashed) is `ok: false` from `browserSnapshot`.
 */

export interface BrowserPage {
  url: string;
  title: string;
}

export interface BrowserSnapshot extends BrowserPage {
  /** False when no page is open (the agent never navigated, or its page crashed): see `error`. */
  ok: boolean;
  /** The accessibility tree: `- role "name" [ref=eN]` lines (without the url/title header the model reads). */
  snapshot: string;
  /** Distinct element refs in it (the seed's `element_count`). */
  elementCount: number;
  /** Cut at the env's `executor.browser.snapshotMaxChars`. */
  truncated: boolean;
  error: string;
}

export interface BrowserImage {
  src: string;
  alt: string;
  width: number;
  height: number;
}

type CallTool = (name: string, args?: Record<string, unknown>) => Promise<ToolResult>;

/** What the agent may have left: no page open, or a crashed one. */
const NOT_OPEN = new Set(["no_page", "crashed"]);

function str(v: unknown): string {
  return typeof v === "string" ? v : "";
}

/** The result of a browser tool the caller asked to act; a refusal becomes ToolContextError. */
async function acted(callTool: CallTool, trajectoryId: string, tool: string, args: Record<string, unknown> = {}): Promise<ToolResult> {
  const r = await callTool(tool, args);
  if (!r.success) throw new ToolContextError(`${tool} failed in trajectory ${trajectoryId}'s browser: ${r.error || "no reason given"}`, tool);
  return r;
}

export async function browserNavigate(callTool: CallTool, trajectoryId: string, url: string): Promise<BrowserPage> {
  const r = await acted(callTool, trajectoryId, "browser_navigate", { url });
  return { url: str(r.metadata["url"]), title: str(r.metadata["title"]) };
}

export async function browserSnapshot(callTool: CallTool, trajectoryId: string, options: { full?: boolean } = {}): Promise<BrowserSnapshot> {
  const r = await callTool("browser_snapshot", options.full ? { full: true } : {});
  if (!r.success) {
    if (NOT_OPEN.has(str(r.metadata["browser_error"]))) return { ok: false, snapshot: "", url: "", title: "", elementCount: 0, truncated: false, error: r.error };
    throw new ToolContextError(`browser_snapshot failed in trajectory ${trajectoryId}'s browser: ${r.error || "no reason given"}`, "browser_snapshot");
  }
  // The model reads "url: …\ntitle: …\n" above the tree; the fields carry them here.
  const tree = r.output.split("\n").slice(2).join("\n");
  const count = r.metadata["element_count"];
  return { ok: true, snapshot: tree, url: str(r.metadata["url"]), title: str(r.metadata["title"]), elementCount: typeof count === "number" ? count : 0, truncated: r.metadata["truncated"] === true, error: "" };
}

export async function browserAct(callTool: CallTool, trajectoryId: string, tool: "browser_click" | "browser_type" | "browser_scroll" | "browser_back" | "browser_press" | "browser_close", args: Record<string, unknown> = {}): Promise<Record<string, unknown>> {
  return (await acted(callTool, trajectoryId, tool, args)).metadata;
}

export async function browserGetImages(callTool: CallTool, trajectoryId: string): Promise<BrowserImage[]> {
  const images = (await acted(callTool, trajectoryId, "browser_get_images")).metadata["images"];
  return Array.isArray(images) ? (images as BrowserImage[]) : [];
}

export async function browserVision(callTool: CallTool, trajectoryId: string, question: string): Promise<string> {
  return (await acted(callTool, trajectoryId, "browser_vision", { question })).output;
}
