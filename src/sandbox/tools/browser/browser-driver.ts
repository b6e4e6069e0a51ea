import type { Page } from "playwright-core";
import { SCREENSHOT_METADATA_KEY, type BrowserToolName } from "../../../protocol/browser-tools.js";
import type { BrowserErrorKind, DriverAnswer, DriverRequest } from "./driver-protocol.js";
import { BrowserStartError, SlotBrowser } from "./slot-browser.js";
import { compactSnapshot, elementCount, truncateSnapshot } from "./snapshot.js";

/**
 * The browser driver's side (it runs in the driver process, driver-main.ts): each slot's
 * Playwright browser and what each tool does with it. Every answer is the model's to read
 * (`browser_error` names the kind) except `gone` (the server starts a fresh browser) and
 * `start` (the browser could not start: the infrastructure's).
 */

/** After a click or a key, how long to let a navigation it caused reach its DOM (not an error when none). */
const SETTLE_MS = 3_000;

/** The seed's script (run in the page): every <img> but data: URLs. */
const GET_IMAGES_JS = `JSON.stringify([...document.images].map((img) => ({ src: img.src, alt: img.alt || "", width: img.naturalWidth, height: img.naturalHeight })).filter((img) => img.src && !img.src.startsWith("data:")))`;
const TWO_FRAMES_JS = "new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(() => r(undefined))))";

class BrowserToolError extends Error {
  constructor(
    readonly kind: BrowserErrorKind | "gone",
    message: string,
  ) {
    super(message);
  }
}

type Done = { output: string; metadata: Record<string, unknown> };

export class BrowserDriver {
  private readonly browsers = new Map<number, SlotBrowser>();

  async handle(req: DriverRequest): Promise<DriverAnswer> {
    const { id } = req;
    try {
      if (req.op === "start") {
        await this.forget(req.slot);
        this.browsers.set(req.slot, await SlotBrowser.start(req.plan, req.timeoutMs));
        return { id, ok: true, started: true };
      }
      if (req.op === "forget") {
        await this.forget(req.slot);
        return { id, ok: true, output: "", metadata: {} };
      }
      const done = await this.run(req.slot, req.tool, req.args, req.timeoutMs, req.maxChars);
      return { id, ok: true, ...done };
    } catch (err) {
      if (err instanceof BrowserStartError) return { id, ok: false, kind: "start", error: err.message };
      if (err instanceof BrowserToolError) return { id, ok: false, kind: err.kind, error: err.message };
      const tool = req.op === "call" ? req.tool : req.op;
      if (isGone(err)) return { id, ok: false, kind: "crashed", error: `${tool} failed: the page crashed or was closed (its renderer may have run out of memory): call browser_navigate to load a page again` };
      return { id, ok: false, kind: "action", error: `${tool} failed: ${playwrightMessage(err)}` };
    }
  }

  private async forget(slot: number): Promise<void> {
    const b = this.browsers.get(slot);
    this.browsers.delete(slot);
    await b?.disconnect();
  }

  private async run(slot: number, tool: BrowserToolName, args: Record<string, unknown>, timeoutMs: number, maxChars: number): Promise<Done> {
    if (tool === "browser_navigate") return this.navigate(slot, String(args["url"]), timeoutMs);
    const page = this.current(slot).page;
    page.setDefaultTimeout(timeoutMs);
    switch (tool) {
      case "browser_snapshot": {
        const full = args["full"] === true;
        const tree = await page.ariaSnapshot({ mode: "ai", timeout: timeoutMs });
        const { url, title } = await where(page);
        // The server's own bound; the env's, usually smaller, is the executor's (executor.browser.snapshotMaxChars).
        const { text, truncated } = truncateSnapshot(full ? tree : compactSnapshot(tree), maxChars);
        return { output: `url: ${url}\ntitle: ${title}\n${text}`, metadata: { url, title, element_count: elementCount(text), full, ...(truncated ? { truncated: true } : {}) } };
      }
      case "browser_click": {
        const ref = refOf(args["ref"]);
        await (await element(page, ref)).click({ timeout: timeoutMs });
        await settle(page);
        return { output: `clicked ${ref}`, metadata: { clicked: ref, url: page.url() } };
      }
      case "browser_type": {
        const ref = refOf(args["ref"]);
        const text = String(args["text"] ?? "");
        await (await element(page, ref)).fill(text, { timeout: timeoutMs });
        return { output: `typed ${JSON.stringify(text)} into ${ref}`, metadata: { typed: text, element: ref } };
      }
      case "browser_scroll": {
        const direction = args["direction"] === "up" ? "up" : "down";
        const vp = page.viewportSize() ?? { width: 1280, height: 720 };
        await page.mouse.move(vp.width / 2, vp.height / 2);
        await page.mouse.wheel(0, (direction === "down" ? 1 : -1) * Math.round(vp.height * 0.8));
        // The wheel scrolls asynchronously: two frames later the page has moved.
        await page.evaluate(TWO_FRAMES_JS);
        return { output: `scrolled ${direction}`, metadata: { scrolled: direction } };
      }
      case "browser_back": {
        const res = await page.goBack({ timeout: timeoutMs, waitUntil: "domcontentloaded" }).catch((err: unknown) => {
          throw navigationError(err, "going back", timeoutMs);
        });
        if (res === null && page.url() === "about:blank") throw new BrowserToolError("navigation", "there is no previous page in this browser's history");
        return { output: `url: ${page.url()}`, metadata: { url: page.url() } };
      }
      case "browser_press": {
        const key = String(args["key"]);
        await page.keyboard.press(key).catch((err: unknown) => {
          throw new BrowserToolError("action", `could not press ${JSON.stringify(key)}: ${playwrightMessage(err)} (key names: Enter, Tab, Escape, ArrowDown, a, Control+a, …)`);
        });
        await settle(page);
        return { output: `pressed ${key}`, metadata: { pressed: key } };
      }
      case "browser_get_images": {
        const images = JSON.parse(await page.evaluate<string>(GET_IMAGES_JS)) as Array<{ src: string; alt: string; width: number; height: number }>;
        return { output: JSON.stringify(images), metadata: { images, count: images.length } };
      }
      case "browser_vision": {
        const shot = await page.screenshot({ type: "jpeg", quality: 80, timeout: timeoutMs });
        const { url, title } = await where(page);
        // The executor hands it to the env's vision model and answers with the model's analysis.
        return { output: "screenshot taken", metadata: { url, title, question: String(args["question"] ?? ""), [SCREENSHOT_METADATA_KEY]: `data:image/jpeg;base64,${shot.toString("base64")}` } };
      }
      case "browser_close":
        // The server closes browsers (it kills their sandbox); never sent here.
        throw new BrowserToolError("action", "browser_close is the server's");
    }
  }

  private async navigate(slot: number, rawUrl: string, timeoutMs: number): Promise<Done> {
    const url = withScheme(rawUrl);
    const page = await this.livePage(slot);
    await page.goto(url, { timeout: timeoutMs, waitUntil: "domcontentloaded" }).catch((err: unknown) => {
      // The page or the browser died under the navigation (a renderer killed for memory): the server starts a fresh one.
      if (isGone(err)) throw new BrowserToolError("gone", playwrightMessage(err));
      throw navigationError(err, `navigating to ${url}`, timeoutMs);
    });
    this.browsers.get(slot)!.navigated = true;
    // Images and scripts may still be loading: a short wait for them, never an error.
    await page.waitForLoadState("load", { timeout: Math.min(SETTLE_MS, timeoutMs) }).catch(() => undefined);
    const { url: finalUrl, title } = await where(page);
    return { output: `url: ${finalUrl}\ntitle: ${title}`, metadata: { url: finalUrl, title } };
  }

  /** The slot's page to navigate: a crashed or closed page replaced; `gone` when the browser cannot give one. */
  private async livePage(slot: number): Promise<Page> {
    const b = this.browsers.get(slot);
    if (!b || !b.usable) throw new BrowserToolError("gone", b?.exited ?? "no browser");
    if (!b.crashed && !b.page.isClosed()) return b.page;
    try {
      const fresh = await b.context.newPage();
      await b.page.close().catch(() => undefined);
      b.page = fresh;
      b.crashed = undefined;
      return fresh;
    } catch (err) {
      throw new BrowserToolError("gone", playwrightMessage(err));
    }
  }

  /** The slot's browser for another tool than navigate: errors the model can act on when there is no page. */
  private current(slot: number): SlotBrowser {
    const b = this.browsers.get(slot);
    if (!b || !b.usable) throw new BrowserToolError("no_page", `no page is open: ${b?.exited ? `${b.exited}; ` : ""}call browser_navigate first`);
    if (b.crashed || b.page.isClosed()) throw new BrowserToolError("crashed", `${b.crashed ?? "the page was closed"}: call browser_navigate to load a page again`);
    if (!b.navigated) throw new BrowserToolError("no_page", "no page is open yet: call browser_navigate first");
    return b;
  }
}

/** The element a ref names on the current page, or a stale-ref error. */
async function element(page: Page, ref: string) {
  const loc = page.getByRef(ref.slice(1));
  const n = await loc.count().catch(() => 0);
  if (n === 0) throw new BrowserToolError("stale_ref", `${ref} is not on the page any more (or never was): take a new browser_snapshot and use a ref from it`);
  return loc.first();
}

/** `example.com` → `http://example.com` (the seed's tool takes what a person would type); a URL with a scheme as it is. */
export function withScheme(url: string): string {
  return /^[a-zA-Z][a-zA-Z0-9+.-]*:/.test(url) && !/^[^:/]+:\d+(\/|$)/.test(url) ? url : `http://${url}`;
}

/** `@e5` from `@e5` or `e5`. */
function refOf(raw: unknown): string {
  const s = String(raw ?? "");
  return s.startsWith("@") ? s : `@${s}`;
}

async function where(page: Page): Promise<{ url: string; title: string }> {
  return { url: page.url(), title: await page.title().catch(() => "") };
}

/** Lets a navigation started by a click or key reach its DOM; none started is fine. */
async function settle(page: Page): Promise<void> {
  await page.waitForLoadState("domcontentloaded", { timeout: SETTLE_MS }).catch(() => undefined);
}

/** Playwright's word that the page, its renderer or the whole browser is gone. */
function isGone(err: unknown): boolean {
  return /Target crashed|Page crashed|crashed!|has been closed|Target closed|Browser closed/i.test(err instanceof Error ? err.message : String(err));
}

function navigationError(err: unknown, what: string, timeoutMs: number): BrowserToolError {
  const msg = playwrightMessage(err);
  if (/Timeout \d+ms exceeded|timed out/i.test(msg)) return new BrowserToolError("timeout", `${what} timed out after ${Math.round(timeoutMs / 1000)} s (the page did not load its document in time)`);
  return new BrowserToolError("navigation", `${what} failed: ${msg}`);
}

/** Playwright's message without its call log (ANSI-coloured lines meant for a test report). */
function playwrightMessage(err: unknown): string {
  const raw = err instanceof Error ? err.message : String(err);
  const first = raw.split("\nCall log:")[0]!.replace(/\u001b\[[0-9;]*m/g, "").trim();
  return first.replace(/^[a-zA-Z.]+: /, "").replace(/^Error: /, "");
}
