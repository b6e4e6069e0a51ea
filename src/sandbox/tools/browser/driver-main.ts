import { BrowserDriver } from "./browser-driver.js";
import type { DriverRequest } from "./driver-protocol.js";

/**
 * The browser driver process (one per sandbox server, forked by driver-client.ts at the first
 * browser start): Playwright and every slot's browser connection live here, not in the server,
 * so a browser that sends Playwright what it cannot handle, or a fault of Playwright's, ends this
 * process and the browsers it drives, never the server and its slots' other tools.
 *
 * Requests arrive on the IPC channel; each gets one answer (driver-protocol.ts). When the
 * server goes away (its channel closes) this process exits, and each browser's bubblewrap
 * (--die-with-parent) takes its sandbox with it.
 */

const driver = new BrowserDriver();

process.on("message", (req: DriverRequest) => {
  void driver.handle(req).then((answer) => process.send?.(answer));
});
process.on("disconnect", () => process.exit(0));
// Playwright rejects promises of pages that crash or close under it: no reason to end every other slot's browser.
process.on("unhandledRejection", () => undefined);
