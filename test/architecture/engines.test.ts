/**
 * Installing the packed package on the Node slotpool declares (>= 20.18.1) must not warn
 * EBADENGINE: every package of the production tree (package-lock.json, dev packages left out)
 * accepts that Node. @connectrpc/connect-node 2.2+ wants Node 22; 2.1.2 is pinned for this.
 */
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";

const ROOT = new URL("../../", import.meta.url);
const pkg = JSON.parse(readFileSync(new URL("package.json", ROOT), "utf8")) as { engines: { node: string } };
const lock = JSON.parse(readFileSync(new URL("package-lock.json", ROOT), "utf8")) as { packages: Record<string, { dev?: boolean; devOptional?: boolean; engines?: { node?: string } | string[] }> };

type Version = [number, number, number];
const parse = (v: string): Version => {
  const [a = 0, b = 0, c = 0] = v.split(".").map((x) => Number.parseInt(x, 10) || 0);
  return [a, b, c];
};
const cmp = (x: Version, y: Version) => x[0] - y[0] || x[1] - y[1] || x[2] - y[2];

/** Whether `node` satisfies a simple engines range: `>=X.Y.Z`, `^X`, `X.x`, `*`, joined by `||` or spaces. */
function accepts(range: string, node: Version): boolean {
  return range.split("||").some((alt) =>
    alt
      .replace(/(>=|<=|>|<|\^|~|=)\s+/g, "$1")
      .trim()
      .split(/\s+/)
      .filter(Boolean)
      .every((part) => {
        const m = /^(>=|>|<=|<|\^|~|=)?v?(\d+(?:\.\d+){0,2})/.exec(part.replace(/\.x/g, ""));
        if (!m || part === "*") return true;
        const v = parse(m[2]!);
        const c = cmp(node, v);
        switch (m[1]) {
          case ">=":
            return c >= 0;
          case ">":
            return c > 0;
          case "<=":
            return c <= 0;
          case "<":
            return c < 0;
          case "^":
            return c >= 0 && node[0] === v[0];
          default:
            return node[0] === v[0];
        }
      }),
  );
}

describe("engines", () => {
  it("every production dependency accepts the oldest Node slotpool declares (no EBADENGINE on install)", () => {
    const oldest = parse(/^>=\s*(\S+)$/.exec(pkg.engines.node)![1]!);
    expect(accepts(">=22", oldest)).toBe(false); // the check can fail
    const refusing = Object.entries(lock.packages)
      .filter(([path, p]) => path !== "" && !p.dev && !p.devOptional && p.engines && !Array.isArray(p.engines) && p.engines.node)
      .filter(([, p]) => !accepts((p.engines as { node: string }).node, oldest))
      .map(([path, p]) => `${path.replace(/^node_modules\//, "")} wants node ${(p.engines as { node: string }).node}`);
    expect(refusing).toEqual([]);
  });
});
