import { rmSync } from "node:fs";
import { join } from "node:path";
import type { BrowserToolName } from "../../../protocol/browser-tools.js";
import { cutOffCause, cutOffMessage, infraMetadata } from "../../core/cut-off.js";
import type { Slot } from "../../core/slot.js";
import type { ToolOutcome } from "../../core/tool-outcome.js";
import { StartGate } from "../../isolation/start-gate.js";
import { SYSTEM_PATHS } from "../../isolation/isolation.js";
import type { ProcessRef } from "../../run/process-barrier.js";
import type { SlotHost } from "../../workspace/slot-host.js";
import { browserLauncher, killBrowserTree, planLaunch, readPid, type LaunchPlan } from "./browser-launch.js";
import { findChromium, visibleInSlot } from "./chromium.js";
import { DriverClient, DriverGoneError } from "./driver-client.js";
import type { BrowserErrorKind, DriverAnswer } from "./driver-protocol.js";

/**
 * The browser tools of every slot (docs/browser.md): at most one browser per slot (so per
 * trajectory), started by the slot's first `browser_navigate`, ended by `browser_close`, the
 * slot's reset, a fork of the slot, the server's shutdown, and the end of the browser driver.
 * A slot's calls run one at a time (its queue), so a slot's browser is driven by one call at a time.
 *
 * The server plans each browser's launch (its sandbox: the slot's uid, cgroups, filter, the
 * terminal's network) and kills it (the reset barrier: every process of its PID namespace
 * dead before the reset goes on); the driver process (driver-main.ts) runs Playwright.
 *
 * What the model did wrong (no page yet, a stale ref, a navigation that failed or timed out, a
 * key that does not exist) is a failed result it reads, with `metadata.browser_error` naming the
 * kind. The infrastructure's: a browser that could not start (`sandbox_start`), a call cut off
 * by a reset or the shutdown (their markers), and a driver that ended under it (`sandbox_error`:
 * every slot's browser goes with it, whichever browser caused it).
 */

/** Chromium start-ups at once in this server: each takes about a CPU-second. */
const START_GATE = new StartGate(2);
/** How long a browser may take to start (a loaded 2-core box takes seconds, not tens of them). */
const START_TIMEOUT_MS = 60_000;
/** Beyond a request's own time limit, how long the driver may take to answer before it counts as wedged. */
const DRIVER_SLACK_MS = 30_000;

class BrowserFailure extends Error {
  constructor(
    readonly kind: BrowserErrorKind,
    message: string,
  ) {
    super(message);
  }
}

class BrowserStartError extends Error {}

/** A process in the slot terminal's namespaces (started if needed): the browser joins its network namespace. */
export type TerminalNetwork = (slot: Slot, allowNetwork: boolean) => Promise<ProcessRef | undefined>;

interface OpenBrowser {
  /** The launcher's pid (bubblewrap's, which it became): the barrier kills its PID namespace. */
  pid: number | undefined;
  allowNetwork: boolean;
  /** Set when the driver ended under it: the slot's next call says so, as the infrastructure's. */
  lost?: string;
}

export class SlotBrowsers {
  private readonly open = new Map<number, OpenBrowser>();
  /** A start in progress per slot, and its plan (a close kills what it started by its pid file). */
  private readonly starting = new Map<number, { done: Promise<OpenBrowser>; plan?: LaunchPlan }>();
  private readonly driver: DriverClient;

  constructor(
    private readonly host: SlotHost,
    private readonly terminalNetwork: TerminalNetwork,
  ) {
    this.driver = new DriverClient(join(host.stateDir, "browser", "driver-tmp"), host.logger, (why) => {
      for (const b of this.open.values()) {
        b.lost = why;
        void killBrowserTree(b.pid);
      }
    });
  }

  /** Whether the slot has a browser running now. */
  isOpen(slot: Slot): boolean {
    const b = this.open.get(slot.index);
    return b !== undefined && b.lost === undefined;
  }

  async call(slot: Slot, tool: BrowserToolName, args: Record<string, unknown>, timeoutS: number | undefined): Promise<ToolOutcome> {
    const signal = slot.abortSignal;
    const timeoutMs = Math.min(timeoutS ?? this.host.limits.defaultTimeoutS, this.host.limits.maxTimeoutS) * 1000;
    // A reset or the shutdown ends the browser at once, so whatever it was doing ends too.
    const onAbort = () => void this.close(slot);
    signal.addEventListener("abort", onAbort, { once: true });
    try {
      const { output, metadata } = await this.run(slot, tool, args, timeoutMs, signal);
      return { success: true, output, error: "", metadata };
    } catch (err) {
      const cut = cutOffCause(signal);
      if (cut) return { success: false, output: "", error: cutOffMessage(tool, cut), metadata: infraMetadata(cut) };
      if (err instanceof BrowserFailure) return { success: false, output: "", error: err.message, metadata: { browser_error: err.kind } };
      if (err instanceof BrowserStartError) return { success: false, output: "", error: `the browser could not start: ${err.message}`, metadata: infraMetadata("sandbox_start") };
      if (err instanceof DriverGoneError) return { success: false, output: "", error: `${tool} could not run: ${err.message}`, metadata: infraMetadata("sandbox_error") };
      throw err;
    } finally {
      signal.removeEventListener("abort", onAbort);
    }
  }

  /** `signal`: the slot's as the call found it (a reset replaces the slot's controller: its own fired, the slot's new one not). */
  private async run(slot: Slot, tool: BrowserToolName, args: Record<string, unknown>, timeoutMs: number, signal: AbortSignal): Promise<{ output: string; metadata: Record<string, unknown> }> {
    if (tool === "browser_close") {
      const had = this.open.has(slot.index) || this.starting.has(slot.index);
      await this.close(slot);
      return { output: had ? "browser closed" : "no browser was open", metadata: { closed: true, ...(had ? {} : { warning: "no browser session was active" }) } };
    }
    if (tool === "browser_navigate") {
      const network = this.host.effectiveNetwork(typeof args["allow_network"] === "boolean" ? args["allow_network"] : this.host.defaultAllowNetwork);
      await this.ensure(slot, network, signal);
      let answer = await this.onDriver(slot, tool, args, timeoutMs);
      if (!answer.ok && answer.kind === "gone" && !signal.aborted) {
        // The browser died under the navigation (its renderer killed for memory): once more, in a fresh one.
        await this.close(slot);
        await this.ensure(slot, network, signal);
        answer = await this.onDriver(slot, tool, args, timeoutMs);
      }
      return done(answer);
    }
    const b = this.open.get(slot.index);
    if (b?.lost) {
      this.open.delete(slot.index);
      throw new DriverGoneError(b.lost);
    }
    if (!b) throw new BrowserFailure("no_page", "no page is open: call browser_navigate first");
    return done(await this.onDriver(slot, tool, args, timeoutMs));
  }

  private onDriver(slot: Slot, tool: BrowserToolName, args: Record<string, unknown>, timeoutMs: number): Promise<DriverAnswer> {
    return this.driver.request({ op: "call", slot: slot.index, tool, args, timeoutMs, maxChars: Math.max(this.host.limits.outputCap, 1000) }, timeoutMs + DRIVER_SLACK_MS);
  }

  /** The slot's running browser for `allowNetwork`, started when there is none (or it was lost, or runs with the other setting). */
  private async ensure(slot: Slot, allowNetwork: boolean, signal: AbortSignal): Promise<void> {
    await this.starting.get(slot.index)?.done.catch(() => undefined);
    const b = this.open.get(slot.index);
    if (b && !b.lost && b.allowNetwork === allowNetwork) return;
    if (b) await this.close(slot);
    const entry: { done: Promise<OpenBrowser>; plan?: LaunchPlan } = { done: Promise.resolve({ pid: undefined, allowNetwork }) };
    entry.done = this.start(slot, allowNetwork, signal, (plan) => (entry.plan = plan));
    this.starting.set(slot.index, entry);
    try {
      this.open.set(slot.index, await entry.done);
    } finally {
      this.starting.delete(slot.index);
    }
  }

  private async start(slot: Slot, allowNetwork: boolean, signal: AbortSignal, planned: (plan: LaunchPlan) => void): Promise<OpenBrowser> {
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
      if (signal.aborted) throw new BrowserStartError("the slot was reset before its browser started");
      const plan = planLaunch(host, { slot, launcher: launcher.path, chromium, network, allowNetwork });
      planned(plan);
      const started = Date.now();
      try {
        const answer = await this.driver.request({ op: "start", slot: slot.index, plan, timeoutMs: START_TIMEOUT_MS }, START_TIMEOUT_MS + DRIVER_SLACK_MS);
        const pid = readPid(plan.pidFile);
        if (!answer.ok) {
          await killBrowserTree(pid);
          throw new BrowserStartError(answer.error);
        }
        host.logger.info({ slot: slot.id, ms: Date.now() - started, network: allowNetwork }, "browser started");
        return { pid, allowNetwork };
      } catch (err) {
        await killBrowserTree(readPid(plan.pidFile));
        throw err;
      } finally {
        rmSync(plan.argsFile, { force: true });
        rmSync(plan.pidFile, { force: true });
      }
    });
  }

  /** Ends the slot's browser (and one starting) and resolves once none of its processes runs. */
  async close(slot: Slot): Promise<void> {
    const pending = this.starting.get(slot.index);
    if (pending) {
      // A start under way: its browser dies now (by its pid file), so the start fails fast.
      if (pending.plan) await killBrowserTree(readPid(pending.plan.pidFile));
      await pending.done.catch(() => undefined);
    }
    const b = this.open.get(slot.index);
    this.open.delete(slot.index);
    if (!b) return;
    await killBrowserTree(b.pid);
    // The barrier is the kill; the driver lets go of its Playwright objects on its own time.
    if (!b.lost && this.driver.running) void this.driver.request({ op: "forget", slot: slot.index }, 10_000).catch(() => undefined);
  }

  async closeAll(): Promise<void> {
    await Promise.all(this.host.slots.map((s) => this.close(s)));
    await this.driver.close();
  }
}

/** A driver's answer as the tool's, or the failure the model reads. */
function done(answer: DriverAnswer): { output: string; metadata: Record<string, unknown> } {
  if (answer.ok && "output" in answer) return { output: answer.output, metadata: answer.metadata };
  if (!answer.ok) {
    if (answer.kind === "start") throw new BrowserStartError(answer.error);
    if (answer.kind === "gone") throw new BrowserFailure("crashed", `the browser ended under the call (${answer.error}): call browser_navigate again`);
    throw new BrowserFailure(answer.kind, answer.error);
  }
  throw new BrowserFailure("action", "the browser driver gave no result");
}
