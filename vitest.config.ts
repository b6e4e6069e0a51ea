import { fileURLToPath } from "node:url";
import { defineConfig } from "vitest/config";

// Integration tests spawn real sandbox servers and bubblewrap; the CI box has 2 cores,
// so files run in a few forks and timeouts are generous rather than flaky.
export default defineConfig({
  // Tests that import an example (which imports "slotpool" by name) get the sources, one
  // copy of every class; the CLI run as a process resolves it to dist/ as users' projects do.
  resolve: { alias: [{ find: /^slotpool$/, replacement: fileURLToPath(new URL("./src/index.ts", import.meta.url)) }] },
  test: {
    include: ["test/**/*.test.ts"],
    exclude: ["test/bench/**", "test/e2b/upstream/**", "node_modules/**", "dist/**"],
    pool: "forks",
    poolOptions: { forks: { maxForks: 2, minForks: 1 } },
    testTimeout: 30_000,
    hookTimeout: 60_000,
    // The default's per-file lines, a progress line (files done / total) and at the end the
    // skipped tests with their reasons and the slowest files (test/support/progress-reporter.ts);
    // JSON for .ci/run's counts.
    reporters: ["default", "./test/support/progress-reporter.ts", "json"],
    outputFile: { json: "test-results/vitest.json" },
  },
});
