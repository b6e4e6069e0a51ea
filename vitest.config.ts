import { defineConfig } from "vitest/config";

// Integration tests spawn real sandbox servers and bubblewrap; the CI box has 2 cores,
// so files run in a few forks and timeouts are generous rather than flaky.
export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    exclude: ["test/bench/**", "node_modules/**", "dist/**"],
    pool: "forks",
    poolOptions: { forks: { maxForks: 2, minForks: 1 } },
    testTimeout: 30_000,
    hookTimeout: 60_000,
    reporters: ["default", "json"],
    outputFile: { json: "test-results/vitest.json" },
  },
});
