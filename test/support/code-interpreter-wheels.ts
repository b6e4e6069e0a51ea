import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, mkdirSync, readFileSync, renameSync, rmSync } from "node:fs";
import { join } from "node:path";
import { TEST_IMAGES_DIR } from "./oci-image.js";

/**
 * The wheels E2B's code interpreter template installs (its requirements.txt, the Python
 * kernel's part, and its server's), downloaded once on this host with `pip download` and
 * cached by the requirement files' content: test/e2b/code-interpreter.test.ts copies them into
 * the build, which installs from them alone, so the build itself reaches no index.
 *
 * For the base image's Python (Debian bookworm's python3, 3.11.2 on x86_64 or aarch64), not
 * the host's: the host may have another Python, and a wheel's Requires-Python may exclude the
 * base's (soupsieve's newest wants ≥ 3.11.5).
 */
const TARGET_PYTHON = "3.11.2";

export function codeInterpreterWheels(python: string, requirements: string[]): { dir: string } | { reason: string } {
  const arch = process.arch === "arm64" ? "aarch64" : "x86_64";
  const hash = createHash("sha256").update(TARGET_PYTHON).update(arch);
  for (const r of requirements) hash.update(readFileSync(r));
  const dir = join(TEST_IMAGES_DIR, `code-interpreter-wheels-${hash.digest("hex").slice(0, 16)}`);
  if (existsSync(dir)) return { dir };
  mkdirSync(TEST_IMAGES_DIR, { recursive: true });
  const tmp = `${dir}.${process.pid}.tmp`;
  // pip takes a platform as given (no older manylinux tags implied): every manylinux the base's glibc (2.36) runs.
  const platforms = [...Array.from({ length: 32 }, (_, i) => `manylinux_2_${36 - i}_${arch}`), `manylinux2014_${arch}`, `manylinux2010_${arch}`, `manylinux1_${arch}`];
  const r = spawnSync(python, ["-m", "pip", "download", "-q", "--only-binary=:all:", "--python-version", TARGET_PYTHON, "--implementation", "cp", ...platforms.flatMap((p) => ["--platform", p]), "-d", tmp, ...requirements.flatMap((f) => ["-r", f])], { encoding: "utf8", timeout: 600_000 });
  if (r.status !== 0) {
    rmSync(tmp, { recursive: true, force: true });
    const why = (r.stderr || r.error?.message || "").split("\n").filter((l) => l && !l.includes("is ignored")).slice(-2).join(" ");
    return { reason: `pip could not download the code interpreter's wheels (no package index?): ${why}` };
  }
  renameSync(tmp, dir);
  return { dir };
}
