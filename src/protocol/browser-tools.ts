import { z } from "zod";
import { NO_NUL } from "./sandbox.js";

/**
 * The seed's browser tools (hermes-agent `tools/browser_tool.py` at da1fbab): their names,
 * arguments and descriptions, as the model is offered them. Their answers (the fields of the
 * seed's JSON, in a result's `metadata`) and what runs them: docs/browser.md. The entries of
 * the tool table are built from these (tool-table.ts); the sandbox server runs them in the
 * trajectory's slot (src/sandbox/tools/browser/).
 */

/** The names, in the seed's order. */
export const BROWSER_TOOL_NAMES = [
  "browser_navigate",
  "browser_snapshot",
  "browser_click",
  "browser_type",
  "browser_scroll",
  "browser_back",
  "browser_press",
  "browser_close",
  "browser_get_images",
  "browser_vision",
] as const;
export type BrowserToolName = (typeof BROWSER_TOOL_NAMES)[number];

export function isBrowserTool(name: string): name is BrowserToolName {
  return (BROWSER_TOOL_NAMES as readonly string[]).includes(name);
}

/**
 * An element's ref from a snapshot: `@e5` (the seed's form), `e5`, or `f1e3` for an element
 * inside a frame. Checked here so a model that passes a selector or a label learns what a ref is.
 */
export const ElementRefSchema = z
  .string()
  .regex(/^@?(f\d+)?e\d+$/, "ref must be an element ref from browser_snapshot, such as @e5 (shown as [ref=e5] in the snapshot)")
  .describe("The element reference from the snapshot (e.g., '@e5', '@e12')");

const url = NO_NUL("url").min(1, "url must not be empty").max(8192, "url is longer than 8192 characters").describe("The URL to navigate to (e.g., 'http://127.0.0.1:8000/' or 'file:///workspace/index.html')");

export const BrowserNavigateArgsSchema = z.object({ url });
export const BrowserSnapshotArgsSchema = z.object({
  full: z.boolean().optional().describe("If true, returns complete page content. If false (default), returns compact view with interactive elements only."),
});
export const BrowserClickArgsSchema = z.object({ ref: ElementRefSchema });
export const BrowserTypeArgsSchema = z.object({
  ref: ElementRefSchema.describe("The element reference from the snapshot (e.g., '@e3')"),
  text: NO_NUL("text").max(65_536, "text is longer than 65536 characters").describe("The text to type into the field"),
});
export const BrowserScrollArgsSchema = z.object({ direction: z.enum(["up", "down"], "direction must be 'up' or 'down'").describe("Direction to scroll") });
export const BrowserPressArgsSchema = z.object({
  key: NO_NUL("key").min(1, "key must not be empty").max(64, "key is longer than 64 characters").describe("Key to press (e.g., 'Enter', 'Tab', 'Escape', 'ArrowDown')"),
});
export const BrowserVisionArgsSchema = z.object({
  question: NO_NUL("question").min(1, "question must not be empty").max(4000, "question is longer than 4000 characters").describe("What you want to know about the page visually. Be specific about what you're looking for."),
});
const NoArgs = z.object({});

/** Descriptions: the seed's, less what named its cloud browser (Browserbase quota, web_search). */
export const BROWSER_TOOL_SPECS = {
  browser_navigate: {
    description:
      "Navigate to a URL in the browser. Opens the page and waits for it to load. Returns the final URL and page title. IMPORTANT: This should be the FIRST browser tool called - it initializes the browser session and loads the target page. Other browser tools require a page to be loaded first. Use browser tools when you need to interact with a page (click buttons, fill forms, handle dynamic content).",
    args: BrowserNavigateArgsSchema,
  },
  browser_snapshot: {
    description:
      "Get a text-based snapshot of the current page's accessibility tree. Returns interactive elements with ref IDs (like @e1, @e2) that can be used with browser_click and browser_type. Use full=true to get the complete page content including all text; use full=false (default) for a compact view focused on interactive elements. Requires browser_navigate to be called first.",
    args: BrowserSnapshotArgsSchema,
  },
  browser_click: {
    description:
      "Click on an element identified by its ref ID from the snapshot (e.g., '@e5'). The ref IDs are shown in square brackets in the snapshot output. Requires browser_navigate and browser_snapshot to be called first.",
    args: BrowserClickArgsSchema,
  },
  browser_type: {
    description: "Type text into an input field identified by its ref ID. Clears the field first, then types the new text. Requires browser_navigate and browser_snapshot to be called first.",
    args: BrowserTypeArgsSchema,
  },
  browser_scroll: {
    description: "Scroll the page in a direction. Use this to reveal more content that may be below or above the current viewport. Requires browser_navigate to be called first.",
    args: BrowserScrollArgsSchema,
  },
  browser_back: {
    description: "Navigate back to the previous page in browser history. Requires browser_navigate to be called first.",
    args: NoArgs,
  },
  browser_press: {
    description: "Press a keyboard key. Useful for submitting forms (Enter), navigating (Tab), or keyboard shortcuts. Requires browser_navigate to be called first.",
    args: BrowserPressArgsSchema,
  },
  browser_close: {
    description: "Close the browser session and release resources. Call this when done with browser tasks.",
    args: NoArgs,
  },
  browser_get_images: {
    description: "Get a list of all images on the current page with their URLs and alt text. Requires browser_navigate to be called first.",
    args: NoArgs,
  },
  browser_vision: {
    description:
      "Take a screenshot of the current page and analyze it with vision AI. Use this when you need to visually understand what's on the page - especially useful for visual verification challenges, complex layouts, or when the text snapshot doesn't capture important visual information. Requires browser_navigate to be called first.",
    args: BrowserVisionArgsSchema,
  },
} as const satisfies Record<BrowserToolName, { description: string; args: z.ZodObject }>;

/**
 * How much longer than its own timeout a `browser_navigate` may take on the wire: it may start
 * the slot's browser first (the server gives a start 60 s, on top of the navigation's own
 * timeout, so that a loaded node's slow start never eats the page's time). Callers' HTTP
 * deadlines add it.
 */
export const BROWSER_START_ALLOWANCE_MS = 90_000;

/** The metadata key a `browser_vision` answer of the sandbox server carries its screenshot in (a data: URL); the executor takes it out. */
export const SCREENSHOT_METADATA_KEY = "screenshot";
