/**
 * `npm run bench -- NAME [ARGS…]` runs test/bench/NAME.ts (built first by the npm script);
 * without NAME it lists the benchmarks. Each benchmark is also a script of its own:
 * `node --import tsx test/bench/NAME.ts`.
 */
import { spawnSync } from "node:child_process";
import { readdirSync } from "node:fs";
import { join } from "node:path";

const dir = import.meta.dirname;
const benches = readdirSync(dir)
  .filter((f) => f.endsWith(".ts") && f !== "run.ts" && f !== "baseline.ts")
  .map((f) => f.slice(0, -3))
  .sort();
const [name, ...args] = process.argv.slice(2);
if (!name || name === "--help") {
  console.log(`usage: npm run bench -- NAME [ARGS...]\nbenchmarks: ${benches.join(", ")}`);
  process.exit(name ? 0 : 2);
}
if (!benches.includes(name)) {
  console.error(`npm run bench: no benchmark '${name}' in test/bench (there are: ${benches.join(", ")})`);
  process.exit(2);
}
const r = spawnSync(process.execPath, ["--import", "tsx", join(dir, `${name}.ts`), ...args], { stdio: "inherit" });
process.exit(r.status ?? 1);
