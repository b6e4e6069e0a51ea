import type { Page } from "playwright-core";
import { SCREENSHOT_METADATA_KEY, type BrowserToolName } from "../../../protocol/browser-tools.js";
import { cutOffCause, cutOffMessage, infraMetadata } from "../../core/cut-off.js";
import type { Slot } from "../../core/slot.js";
import type { ToolOutcome } from "../../core/tool-outcome.js";
import { StartGate } from "../../isolation/start-gate.js";
import { SYSTEM_PATHS } from "../../isolation/isolation.js";
import type { ProcessRef } from "../../run/process-barrier.js";
import type { SlotHost } from "../../workspace/slot-host.js";
import { browserLauncher, planLaunch } from "./browser-launch.js";
import { findChromium, visibleInSlot } from "./chromium.js";
import { BrowserStartError, SlotBrowser } from "./slot-browser.js";
import { compactSnapshot, elementCount, truncateSnapshot } from "./snapshot.js";

/**
 * The browser tools of every slot: at most one browser per slot (so per trajectory), started
 * by the slot's first `browser_navigate`, ended by `browser_close`, the slot's reset, a fork of
 * the slot and the server's shutdown (`close`). A slot's calls run one at a time (its queue), so
 * a slot's browser is driven by one call at a time.
 *
 * What the model did wrong (no page yet, a stale ref, a navigation that failed or timed out, a
 * key that does not exist) is a failed result it reads, with `metadata.browser_error` naming the
 * kind; only a browser that could not start is the infrastructure's (`sandbox_start`), and a
 * call cut off by a reset or the shutdown carries that marker as every other tool's does.
 */

/** Chromium start-ups at once in this server: each takes about a CPU-second. */
const START_GATE = new StartGate(2);
/** How long a browser may take to start (a loaded 2-core box takes seconds, not tens of them). */
const START_TIMEOUT_MS = 60_000;
/** After a click or a key, how long to let a navigation it caused reach its DOM (not an error when none). */
const SETTLE_MS = 3_000;

export type BrowserErrorKind = "no_page" | "stale_ref" | "timeout" | "navigation" | "crashed" | "action";

class BrowserToolError extends Error {
  constructor(
    readonly kind: BrowserErrorKind,
    message: string,
  ) {
    super(message);
  }
}

/** A process in the slot terminal's namespaces (started if needed): the browser joins its network namespace. */
export type TerminalNetwork = (slot: Slot, allowNetwork: boolean) => Promise<ProcessRef | undefined>;

export class SlotBrowsers {
  private readonly browsers = new Map<number, SlotBrowser>();
  /** A start in progress per slot (a close waits for it, then kills what it made). */
  private readonly starting = new Map<number, Promise<SlotBrowser>>();

  constructor(
    private readonly host: SlotHost,
    private readonly terminalNetwork: TerminalNetwork,
  ) {}

  /** Whether the slot has a browser running now. */
  isOpen(slot: Slot): boolean {
    return this.browsers.get(slot.index)?.usable === true;
  }

  async call(slot: Slot, tool: BrowserToolName, args: Record<string, unknown>, timeoutS: number | undefined): Promise<ToolOutcome> {
    const signal = slot.abortSignal;
    const timeoutMs = Math.min(timeoutS ?? this.host.limits.defaultTimeoutS, this.host.limits.maxTimeoutS) * 1000;
    // A reset or the shutdown ends the browser at once, so whatever it was doing ends too.
    const onAbort = () => void this.close(slot);
    signal.addEventListener("abort", onAbort, { once: true });
    try {
      const { output, metadata } = await this.run(slot, tool, args, timeoutMs);
      return { success: true, output, error: "", metadata };
    } catch (err) {
      const cut = cutOffCause(signal);
      if (cut) return { success: false, output: "", error: cutOffMessage(tool, cut), metadata: infraMetadata(cut) };
      if (err instanceof BrowserStartError) return { success: false, output: "", error: `the browser could not start: ${err.message}`, metadata: infraMetadata("sandbox_start") };
      if (err instanceof BrowserToolError) return { success: false, output: "", error: err.message, metadata: { browser_error: err.kind } };
      if (isGone(err)) return { success: false, output: "", error: `${tool} failed: the page crashed or was closed (its renderer may have run out of memory): call browser_navigate to load a page again`, metadata: { browser_error: "crashed" } };
      return { success: false, output: "", error: `${tool} failed: ${playwrightMessage(err)}`, metadata: { browser_error: "action" } };
    } finally {
      signal.removeEventListener("abort", onAbort);
    }
  }

  private async run(slot: Slot, tool: BrowserToolName, args: Record<string, unknown>, timeoutMs: number): Promise<{ output: string; metadata: Record<string, unknown> }> {
    if (tool === "browser_navigate") return this.navigate(slot, String(args["url"]), typeof args["allow_network"] === "boolean" ? args["allow_network"] : this.host.defaultAllowNetwork, timeoutMs);
    if (tool === "browser_close") {
      const had = this.browsers.has(slot.index) || this.starting.has(slot.index);
      await this.close(slot);
      return { output: had ? "browser closed" : "no browser was open", metadata: { closed: true, ...(had ? {} : { warning: "no browser session was active" }) } };
    }
    const b = this.current(slot);
    const page = b.page;
    page.setDefaultTimeout(timeoutMs);
    switch (tool) {
      case "browser_snapshot": {
        const full = args["full"] === true;
        const tree = await page.ariaSnapshot({ mode: "ai", timeout: timeoutMs });
        const shown = full ? tree : compactSnapshot(tree);
        const { url, title } = await where(page);
        // The server's own bound (the env's, usually smaller, is the executor's: executor.browser.snapshotMaxChars).
        const { text, truncated } = truncateSnapshot(shown, Math.max(this.host.limits.outputCap, 1000));
        return { output: `url: ${url}\ntitle: ${title}\n${text}`, metadata: { url, title, element_count: elementCount(text), full, ...(truncated ? { truncated: true } : {}) } };
      }
      case "browser_click": {
        const ref = refOf(args["ref"]);
        await (await this.element(page, ref)).click({ timeout: timeoutMs });
        await settle(page);
        return { output: `clicked ${ref}`, metadata: { clicked: ref, url: page.url() } };
      }
      case "browser_type": {
        const ref = refOf(args["ref"]);
        const text = String(args["text"] ?? "");
        await (await this.element(page, ref)).fill(text, { timeout: timeoutMs });
        return { output: `typed ${JSON.stringify(text)} into ${ref}`, metadata: { typed: text, element: ref } };
      }
      case "browser_scroll": {
        const direction = args["direction"] === "up" ? "up" : "down";
        const vp = page.viewportSize() ?? { width: 1280, height: 720 };
        await page.mouse.move(vp.width / 2, vp.height / 2);
        await page.mouse.wheel(0, (direction === "down" ? 1 : -1) * Math.round(vp.height * 0.8));
        // The wheel scrolls asynchronously: a frame later the page has moved.
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
    }
  }

  private async navigate(slot: Slot, rawUrl: string, allowNetwork: boolean, timeoutMs: number): Promise<{ output: string; metadata: Record<string, unknown> }> {
    const url = withScheme(rawUrl);
    const network = this.host.effectiveNetwork(allowNetwork);
    let page = await this.livePage(slot, network);
    try {
      await page.goto(url, { timeout: timeoutMs, waitUntil: "domcontentloaded" });
    } catch (err) {
      // The page or the browser died under the navigation (a renderer killed for memory): once more, in a fresh one.
      if (!isGone(err) || slot.abortSignal.aborted) throw navigationError(err, `navigating to ${url}`, timeoutMs);
      await this.close(slot);
      page = await this.livePage(slot, network);
      await page.goto(url, { timeout: timeoutMs, waitUntil: "domcontentloaded" }).catch((again: unknown) => {
        throw navigationError(again, `navigating to ${url}`, timeoutMs);
      });
    }
    this.browsers.get(slot.index)!.navigated = true;
    // Images and scripts may still be loading: a short wait for them, never an error.
    await page.waitForLoadState("load", { timeout: Math.min(SETTLE_MS, timeoutMs) }).catch(() => undefined);
    const { url: finalUrl, title } = await where(page);
    return { output: `url: ${finalUrl}\ntitle: ${title}`, metadata: { url: finalUrl, title } };
  }

  /** The slot's page to navigate: the browser started if needed, a crashed or closed page replaced, a browser that cannot open one restarted. */
  private async livePage(slot: Slot, allowNetwork: boolean): Promise<Page> {
    const b = await this.ensure(slot, allowNetwork);
    if (!b.crashed && !b.page.isClosed()) return b.page;
    try {
      const fresh = await b.context.newPage();
      await b.page.close().catch(() => undefined);
      b.page = fresh;
      b.crashed = undefined;
      return fresh;
    } catch {
      await this.close(slot);
      return (await this.ensure(slot, allowNetwork)).page;
    }
  }

  /** The slot's browser for another tool than navigate: errors the model can act on when there is no page. */
  private current(slot: Slot): SlotBrowser {
    const b = this.browsers.get(slot.index);
    if (!b || !b.usable) {
      const why = b?.exited ? `${b.exited}; ` : "";
      throw new BrowserToolError("no_page", `no page is open: ${why}call browser_navigate first`);
    }
    if (b.crashed || b.page.isClosed()) throw new BrowserToolError("crashed", `${b.crashed ?? "the page was closed"}: call browser_navigate to load a page again`);
    if (!b.navigated) throw new BrowserToolError("no_page", "no page is open yet: call browser_navigate first");
    return b;
  }

  /** The element a ref names on the current page, or a stale-ref error. */
  private async element(page: Page, ref: string) {
    const loc = page.getByRef(ref.slice(1));
    const n = await loc.count().catch(() => 0);
    if (n === 0) throw new BrowserToolError("stale_ref", `${ref} is not on the page any more (or never was): take a new browser_snapshot and use a ref from it`);
    return loc.first();
  }

  /** The slot's running browser for `allowNetwork`, started when there is none (or it died, or runs with the other setting). */
  private async ensure(slot: Slot, allowNetwork: boolean): Promise<SlotBrowser> {
    const pending = this.starting.get(slot.index);
    if (pending) await pending.catch(() => undefined);
    const b = this.browsers.get(slot.index);
    if (b && b.usable && b.allowNetwork === allowNetwork) return b;
    if (b) await this.close(slot);
    const start = this.start(slot, allowNetwork);
    this.starting.set(slot.index, start);
    try {
      const started = await start;
      this.browsers.set(slot.index, started);
      return started;
    } finally {
      this.starting.delete(slot.index);
    }
  }

  private async start(slot: Slot, allowNetwork: boolean): Promise<SlotBrowser> {
    const host = this.host;
    if (!host.bwrap.available || !host.bwrap.path) throw new BrowserStartError(`the browser runs only in a slot's sandbox, and bubblewrap is unavailable here: ${host.bwrap.reason ?? "unknown reason"}`);
    const chromium = findChromium();
    if (!chromium) throw new BrowserStartError("Chromium is not installed on the sandbox host (Debian: apt-get install chromium; or set SLOTPOOL_CHROMIUM)");
    if (!visibleInSlot(chromium, SYSTEM_PATHS)) throw new BrowserStartError(`Chromium at ${chromium} is outside what a slot sees (${SYSTEM_PATHS.join(", ")}): install it under /usr`);
    const launcher = browserLauncher([host.stateDir]);
    if ("error" in launcher) throw new BrowserStartError(`the browser launcher is unavailable: ${launcher.error}`);
    const network = await this.terminalNetwork(slot, allowNetwork);
    if (!network) throw new BrowserStartError(`the slot's terminal namespace, whose network the browser joins, is unavailable: ${host.spawnerReason ?? "no spawner"}`);
    return START_GATE.run(async () => {
      // Cut off while waiting for its turn: nothing was started.
      if (slot.abortSignal.aborted) throw new BrowserStartError("the slot was reset before its browser started");
      const plan = planLaunch(host, { slot, launcher: launcher.path, chromium, network, allowNetwork });
      const started = Date.now();
      const b = await SlotBrowser.start(plan, allowNetwork, network, START_TIMEOUT_MS);
      host.logger.info({ slot: slot.id, ms: Date.now() - started, network: allowNetwork }, "browser started");
      return b;
    });
  }

  /** Ends the slot's browser (and one starting) and resolves once none of its processes runs. */
  async close(slot: Slot): Promise<void> {
    const pending = this.starting.get(slot.index);
    if (pending) await pending.catch(() => undefined);
    const b = this.browsers.get(slot.index);
    this.browsers.delete(slot.index);
    if (b) await b.kill();
  }

  async closeAll(): Promise<void> {
    await Promise.all(this.host.slots.map((s) => this.close(s)));
  }
}

/** The seed's script (run in the page): every <img> but data: URLs. */
const GET_IMAGES_JS = `JSON.stringify([...document.images].map((img) => ({ src: img.src, alt: img.alt || "", width: img.naturalWidth, height: img.naturalHeight })).filter((img) => img.src && !img.src.startsWith("data:")))`;
const TWO_FRAMES_JS = "new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(() => r(undefined))))";

/** `example.com` → `http://example.com` (the seed's tool takes what a person would type); a URL with a scheme as it is. */
function withScheme(url: string): string {
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
