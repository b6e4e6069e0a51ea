import { readFileSync, rmSync } from "node:fs";
import type { Browser, BrowserContext, Page } from "playwright-core";
import { firstChild, isRunning, killNamespaceInit, processRef, type ProcessRef } from "../../run/process-barrier.js";
import type { LaunchPlan } from "./browser-launch.js";

/**
 * One slot's running browser: a Chromium in the slot's sandbox (browser-launch.ts) driven by
 * Playwright over its CDP pipe, one browser context, the page the model is on, and the
 * barrier that ends it (every process of its PID namespace dead when `kill` resolves).
 */

/** Playwright is loaded at the first browser start: a server whose slots never browse never pays for it. */
let playwright: Promise<typeof import("playwright-core")> | undefined;

export class BrowserStartError extends Error {
  override name = "BrowserStartError";
}

export class SlotBrowser {
  /** The page the tools act on: the newest one opened (a link with target=_blank moves there). */
  page: Page;
  /** Whether browser_navigate has loaded a page (the other tools need one). */
  navigated = false;
  /** Set once the page crashed (renderer killed, out of memory): the next navigation starts over. */
  crashed: string | undefined;
  /** Set once the browser process is gone (killed, crashed, out of memory), with why. */
  exited: string | undefined;
  private readonly disconnected: Promise<void>;

  private constructor(
    private readonly browser: Browser,
    readonly context: BrowserContext,
    page: Page,
    /** The launcher's pid, which became bubblewrap's (outside the sandbox; its first child is the namespace's init). */
    readonly pid: number,
    /** The network setting it was started for, and the terminal namespace it joined. */
    readonly allowNetwork: boolean,
    readonly network: ProcessRef,
  ) {
    this.page = page;
    this.watch(page);
    context.on("page", (p) => {
      this.page = p;
      this.watch(p);
    });
    this.disconnected = new Promise((resolve) => browser.once("disconnected", () => resolve()));
    void this.disconnected.then(() => (this.exited ??= "the browser process exited (it may have run out of memory)"));
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
   * Starts the browser `plan` describes and opens its page. Throws BrowserStartError (with
   * Chromium's last lines) when it does not come up within `timeoutMs`, killing what started.
   */
  static async start(plan: LaunchPlan, allowNetwork: boolean, network: ProcessRef, timeoutMs: number): Promise<SlotBrowser> {
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
      const pid = readPid(plan.pidFile);
      if (pid === undefined) throw new BrowserStartError("the launcher wrote no pid");
      const context = await browser.newContext({ acceptDownloads: false });
      const page = await context.newPage();
      return new SlotBrowser(browser, context, page, pid, allowNetwork, network);
    } catch (err) {
      await killPid(readPid(plan.pidFile));
      await browser?.close().catch(() => undefined);
      const why = err instanceof Error ? err.message.split("\n")[0] : String(err);
      const tail = logs.filter((l) => /\[err\]|slotpool-browser-launch|error/i.test(l)).slice(-6).join("\n");
      throw new BrowserStartError(`${why}${tail ? `\n${tail}` : ""}`);
    } finally {
      rmSync(plan.argsFile, { force: true });
      rmSync(plan.pidFile, { force: true });
    }
  }

  /** Whether it can take a call (running, page not crashed). */
  get usable(): boolean {
    return this.exited === undefined && this.browser.isConnected();
  }

  /**
   * Kills the browser and resolves once no process of its sandbox runs (the reset barrier):
   * the namespace's init is SIGKILLed and waited for (the kernel ends every other process of
   * the PID namespace first), then bubblewrap outside it.
   */
  async kill(): Promise<void> {
    this.exited ??= "the browser was closed";
    await killPid(this.pid);
    // Playwright sees the pipe close; its own clean-up (temporary dirs on the server) follows.
    await Promise.race([this.disconnected, new Promise((r) => setTimeout(r, 2_000).unref())]);
  }
}

function readPid(file: string): number | undefined {
  try {
    const n = Number(readFileSync(file, "utf8").trim());
    return Number.isInteger(n) && n > 0 ? n : undefined;
  } catch {
    return undefined;
  }
}

/** SIGKILL of bubblewrap's namespace init (waited for) and of bubblewrap itself. */
async function killPid(pid: number | undefined): Promise<void> {
  if (pid === undefined) return;
  const self = processRef(pid);
  const init = firstChild(pid);
  if (init) await killNamespaceInit(init).catch(() => undefined);
  if (self && isRunning(self)) {
    try {
      process.kill(pid, "SIGKILL");
    } catch {
      /* gone */
    }
  }
}
