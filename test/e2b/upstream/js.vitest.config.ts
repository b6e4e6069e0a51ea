import { fileURLToPath } from "node:url";
import { defineConfig, type Plugin } from "vitest/config";

// E2B's own JS SDK tests (ORIGIN.md), run against `slotpool e2b-server` with the npm `e2b`
// package: their imports of the SDK's sources (`../../src`, `../../../src/errors`, ...) are
// resolved to the package; everything else is as upstream wrote it.
const here = fileURLToPath(new URL("./js/", import.meta.url));
const vitest4Compat = fileURLToPath(new URL("./vitest4-compat.ts", import.meta.url));

function sdkSourcesAreThePackage(): Plugin {
  return {
    name: "e2b-sdk-sources-are-the-package",
    enforce: "pre",
    async resolveId(source, importer) {
      // Only upstream's files (js/) mean the SDK by `src`; the harness outside it
      // imports slotpool's own src.
      if (!importer?.startsWith(here)) return null;
      // Vitest 4's `test.override` on this repository's Vitest 3 (vitest4-compat.ts).
      if (source === "vitest") return vitest4Compat;
      if (!/^(\.\.\/)+src(\/|$)/.test(source)) return null;
      return this.resolve("e2b", importer, { skipSelf: true });
    },
  };
}

export default defineConfig({
  root: here,
  plugins: [sdkSourcesAreThePackage()],
  test: {
    include: ["**/*.test.ts"],
    globalSetup: [fileURLToPath(new URL("./js-global-setup.ts", import.meta.url))],
    // `*.localhost` is loopback in every worker, as with systemd-resolved (localhost-dns.ts).
    setupFiles: [fileURLToPath(new URL("./localhost-dns.ts", import.meta.url))],
    pool: "forks",
    poolOptions: { forks: { maxForks: 2, minForks: 1 } },
    testTimeout: 30_000,
    hookTimeout: 60_000,
  },
});
