import { existsSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

/**
 * How to start the `slotpool` command from inside slotpool (local provisioner, Nomad
 * emulator, tests): this Node binary running the built `main.js`. When this module runs
 * from TypeScript sources (vitest), the built file under `dist/` is used, so `npm run build`
 * must have run (the test script does it).
 */
export function slotpoolCommand(): { command: string; args: string[] } {
  // This file sits in src/pool/ (or dist/src/pool/); the command is its sibling room cli/.
  const here = dirname(fileURLToPath(import.meta.url));
  let main = join(here, "..", "cli", "main.js");
  if (!existsSync(main)) {
    const root = resolve(here, "..", "..");
    main = join(root, "dist", "src", "cli", "main.js");
    if (!existsSync(main)) {
      throw new Error(`cannot find the built slotpool command at ${main}: run 'npm run build' first`);
    }
  }
  return { command: process.execPath, args: [main] };
}
