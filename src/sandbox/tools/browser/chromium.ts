import { accessSync, constants as fsc, realpathSync } from "node:fs";

/**
 * Which Chromium a slot's browser runs, and with which switches. The browser is the host's
 * (Debian's `chromium` package; the sandbox image installs it): a slot sees the host's /usr
 * read-only, so the binary is in reach inside the sandbox as it is outside. A slot whose root
 * is an image of its own would need the binary bound in (docs/browser.md).
 */

/** Where distributions put the real binary (Debian's /usr/bin/chromium is a shell wrapper that reads /etc/chromium.d). */
const CANDIDATES = ["/usr/lib/chromium/chromium", "/usr/lib/chromium-browser/chromium-browser", "/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome"];

/** The Chromium binary: SLOTPOOL_CHROMIUM, else the first of the usual places; null when none is installed. */
export function findChromium(env: NodeJS.ProcessEnv = process.env): string | null {
  const explicit = env["SLOTPOOL_CHROMIUM"];
  for (const c of explicit ? [explicit] : CANDIDATES) {
    try {
      accessSync(c, fsc.X_OK);
      return realpathSync(c);
    } catch {
      /* next */
    }
  }
  return null;
}

/** Under /usr (or another path every slot sees read-only): the only places a slot can run a binary from. */
export function visibleInSlot(path: string, systemPaths: readonly string[]): boolean {
  return systemPaths.some((p) => path === p || path.startsWith(p + "/"));
}

/** The profile (and HOME) inside the slot: its /tmp, on the slot's bounded disk, emptied by reset. */
export const PROFILE_DIR = "/tmp/.slotpool-browser";

/**
 * Features turned off: Playwright's list (chromiumSwitches.ts, 1.65: what makes an automated
 * Chromium predictable) plus what would try the network at start (a slot's network is closed or
 * slirp's, and each refused attempt costs time) or download models.
 */
const DISABLED_FEATURES = [
  "AvoidUnnecessaryBeforeUnloadCheckSync",
  "DestroyProfileOnBrowserClose",
  "HttpsUpgrades",
  "HttpsFirstBalancedModeAutoEnable",
  "LensOverlay",
  "MediaRouter",
  "PaintHolding",
  "ThirdPartyStoragePartitioning",
  "AvoidCorsURLLoaderRestartOnRedirect",
  "OptimizationHints",
  "OptimizationGuideModelDownloading",
  "OnDeviceModelService",
  "NetworkTimeServiceQuerying",
  "AimEnabled",
  "PreconnectToSearch",
  "Translate",
  "InterestFeedContentSuggestions",
  "CertificateTransparencyComponentUpdater",
  "AutofillServerCommunication",
];

/**
 * Chromium's switches. The slot is the sandbox (bubblewrap's namespaces, the slot's seccomp
 * filter and cgroups), so Chromium's own sandbox is off: it needs new user namespaces, which the
 * slot filter refuses to every slot process (docs/security-model.md, "The browser").
 */
export function chromiumSwitches(options: { v8HeapMb?: number | undefined } = {}): string[] {
  return [
    "--headless",
    "--no-sandbox",
    // The zygote only serves Chromium's own sandbox; without it every renderer is a plain fork+exec.
    "--no-zygote",
    "--remote-debugging-pipe",
    `--user-data-dir=${PROFILE_DIR}/profile`,
    "--no-startup-window",
    // Memory (measured, docs/browser.md): no GPU process (software compositing in the browser
    // process), the network service in the browser process, one renderer process.
    "--disable-gpu",
    "--in-process-gpu",
    "--renderer-process-limit=1",
    "--enable-features=NetworkServiceInProcess2,CDPScreenshotNewSurface,SkipListAccountsWithoutGaiaCookies",
    `--disable-features=${DISABLED_FEATURES.join(",")}`,
    // Shared memory in /tmp (the slot's disk) rather than /dev/shm's smaller part of it.
    "--disable-dev-shm-usage",
    // Nothing in the background: no updates, sync, metrics, crash reports, extensions; no QUIC
    // (UDP), which a closed network would only time out on.
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-breakpad",
    "--disable-field-trial-config",
    "--metrics-recording-only",
    "--no-first-run",
    "--no-default-browser-check",
    "--no-service-autorun",
    "--disable-default-apps",
    "--disable-extensions",
    "--disable-component-extensions-with-background-pages",
    "--disable-domain-reliability",
    "--disable-quic",
    "--disable-search-engine-choice-screen",
    "--password-store=basic",
    "--use-mock-keychain",
    // Predictable pages under automation (Playwright's choices).
    "--disable-background-timer-throttling",
    "--disable-backgrounding-occluded-windows",
    "--disable-back-forward-cache",
    "--disable-renderer-backgrounding",
    "--disable-hang-monitor",
    "--disable-ipc-flooding-protection",
    "--disable-popup-blocking",
    "--disable-prompt-on-repost",
    "--allow-pre-commit-input",
    "--force-color-profile=srgb",
    "--hide-scrollbars",
    "--mute-audio",
    "--blink-settings=primaryHoverType=2,availableHoverTypes=2,primaryPointerType=4,availablePointerTypes=4",
    ...(options.v8HeapMb ? [`--js-flags=--max-old-space-size=${options.v8HeapMb}`] : []),
  ];
}
