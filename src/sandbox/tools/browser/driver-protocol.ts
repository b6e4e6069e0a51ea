import type { BrowserToolName } from "../../../protocol/browser-tools.js";
import type { LaunchPlan } from "./browser-launch.js";

/**
 * The messages between the sandbox server and its browser driver (driver-main.ts): one child
 * process per server that runs Playwright, so that nothing a browser sends over CDP, and no
 * fault of Playwright's, can take the server (every slot's terminal and files) down with it.
 * Requests carry an id; each gets one answer with the same id.
 */

/** What the model did wrong, or what happened to its page: a failed result it reads (`metadata.browser_error`). */
export type BrowserErrorKind = "no_page" | "stale_ref" | "timeout" | "navigation" | "crashed" | "action";

export type DriverRequest =
  /** Starts the slot's browser (Playwright spawns `plan.executable`) and opens its page. */
  | { id: number; op: "start"; slot: number; plan: LaunchPlan; timeoutMs: number }
  /** Runs one tool on the slot's browser; the snapshot text is cut at `maxChars`. */
  | { id: number; op: "call"; slot: number; tool: BrowserToolName; args: Record<string, unknown>; timeoutMs: number; maxChars: number }
  /** The server killed the slot's browser: drop what Playwright holds of it. */
  | { id: number; op: "forget"; slot: number };

export type DriverAnswer = { id: number } & (
  | { ok: true; output: string; metadata: Record<string, unknown> }
  | { ok: true; started: true }
  /** `gone`: the slot has no live browser or page to navigate in (the server starts a new one); `start`: it could not start. */
  | { ok: false; kind: BrowserErrorKind | "gone" | "start"; error: string }
);
