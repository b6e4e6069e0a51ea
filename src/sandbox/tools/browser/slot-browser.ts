import type { Browser, BrowserContext, Page } from "playwright-core";
import type { LaunchPlan } from "./browser-launch.js";

/**
 * One slot's running browser, as the driver process holds it: a Chromium in the slot's
 * sandbox (browser-launch.ts) driven by Playwright over its CDP pipe, one browser context and
 * the page the model is on. Its processes are the server's to kill (the reset barrier,
 * browser-tools.ts); here it is only let go.
 */

/** Playwright is loaded at the first browser start. */
let playwright: Promise<typeof import("playwright-core")> | undefined;

export class BrowserStartError extends Error {
  override name = "BrowserStartError";
}

export class SlotBrowser {
  /** The page the tools act on: the newest one opened (a link with target=_blank moves there). */
  page: Page;
  /** Whether browser_navigate has loaded a page (the other tools need one). */
  navigated = false;
  /** Set once the page crashed (renderer killed, out of memory): the next navigation replaces it. */
  crashed: string | undefined;
  /** Set once the browser process is gone (killed, crashed, out of memory), with why. */
  exited: string | undefined;

  private constructor(
    private readonly browser: Browser,
    readonly context: BrowserContext,
    page: Page,
  ) {
    this.page = page;
    this.watch(page);
    context.on("page", (p) => {
      this.page = p;
      this.watch(p);
    });
    browser.once("disconnected", () => (this.exited ??= "the browser process exited (it may have run out of memory)"));
  }

  private watch(page: Page): void {
    page.on("crash", () => {
      if (page === this.page) this.crashed = "the page crashed (its renderer was killed, most likely out of memory)";
    });
    page.on("close", () => {
      if (page !== this.page) return;
      const open = this.context.pages();
      if (open.length > 0) this.page = open[open.length - 1]!;
    });
  }

  /**
   * Starts the browser `plan` describes and opens its page. Throws BrowserStartError (with the
   * launcher's and Chromium's last lines) when it does not come up within `timeoutMs`.
   */
  static async start(plan: LaunchPlan, timeoutMs: number): Promise<SlotBrowser> {
    playwright ??= import("playwright-core");
    const { chromium } = await playwright;
    const logs: string[] = [];
    let browser: Browser | undefined;
    try {
      browser = await chromium.launch({
        executablePath: plan.executable,
        args: plan.args,
        // Every switch is ours (chromium.ts): Playwright's would name a profile on the host.
        ignoreDefaultArgs: true,
        env: {},
        handleSIGINT: false,
        handleSIGTERM: false,
        handleSIGHUP: false,
        timeout: timeoutMs,
        // Deprecated but the only way to see why a start failed (the launcher's and Chromium's stderr).
        logger: { isEnabled: (name) => name === "browser", log: (_name, _sev, message) => void (logs.push(String(message)), logs.length > 40 && logs.shift()) },
      });
      const context = await browser.newContext({ acceptDownloads: false });
      const page = await context.newPage();
      return new SlotBrowser(browser, context, page);
    } catch (err) {
      await browser?.close().catch(() => undefined);
      const why = err instanceof Error ? err.message.split("\n")[0] : String(err);
      const tail = logs.filter((l) => /\[err\]|slotpool-browser-launch|error/i.test(l)).slice(-6).join("\n");
      throw new BrowserStartError(`${why}${tail ? `\n${tail}` : ""}`);
    }
  }

  /** Whether it can take a call (its process runs and Playwright is connected). */
  get usable(): boolean {
    return this.exited === undefined && this.browser.isConnected();
  }

  /** Lets go of it (the server has killed, or kills, its processes); bounded, never throws. */
  async disconnect(): Promise<void> {
    this.exited ??= "the browser was closed";
    await Promise.race([this.browser.close().catch(() => undefined), new Promise((r) => setTimeout(r, 2_000).unref())]);
  }
}
