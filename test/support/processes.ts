import { readFileSync, readdirSync } from "node:fs";

/** Every process below `pid` (from /proc's parent links), children before grandchildren. */
export function descendants(pid: number): number[] {
  const parentOf = new Map<number, number>();
  for (const name of readdirSync("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const stat = readFileSync(`/proc/${name}/stat`, "utf8");
      parentOf.set(Number(name), Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]));
    } catch {
      /* exited meanwhile */
    }
  }
  const out: number[] = [];
  const walk = (p: number): void => {
    for (const [c, pp] of parentOf) if (pp === p) {
      out.push(c);
      walk(c);
    }
  };
  walk(pid);
  return out;
}
