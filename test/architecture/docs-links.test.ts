/**
 * Every relative link in README.md and docs/*.md points at a file of the repository (and,
 * with a #fragment into a markdown file, at one of its headings), so moving a section or a
 * file cannot leave a dead link behind.
 */
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { dirname, join, relative } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";

const ROOT = fileURLToPath(new URL("../..", import.meta.url));
const PAGES = ["README.md", ...readdirSync(join(ROOT, "docs")).filter((f) => f.endsWith(".md")).map((f) => `docs/${f}`)];

/** Lines outside fenced code blocks. */
function prose(text: string): string[] {
  let fenced = false;
  return text.split("\n").filter((line) => {
    if (line.startsWith("```")) fenced = !fenced;
    return !fenced && !line.startsWith("```");
  });
}

/** Link targets of a page: `[text](target)` and `![alt](target)`, inline code left out. */
export function linkTargets(text: string): string[] {
  return prose(text).flatMap((line) => [...line.replace(/`[^`]*`/g, "").matchAll(/\]\(([^)\s]+)\)/g)].map((m) => m[1]!));
}

/** GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens. */
export function anchorOf(heading: string): string {
  return heading
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{N}\s_-]/gu, "")
    .replace(/\s/g, "-");
}

function anchors(file: string): Set<string> {
  return new Set(prose(readFileSync(file, "utf8")).flatMap((l) => (/^#{1,6} /.test(l) ? [anchorOf(l.replace(/^#+ /, ""))] : [])));
}

/** Dead links of one page, as "page -> target (why)". */
function deadLinks(page: string, text = readFileSync(join(ROOT, page), "utf8")): string[] {
  const file = join(ROOT, page);
  const dead: string[] = [];
  for (const target of linkTargets(text)) {
    if (/^[a-z]+:/i.test(target)) continue; // http(s), mailto: not a repository path
    const [path, fragment] = target.split("#", 2) as [string, string | undefined];
    const resolved = path === "" ? file : join(dirname(file), decodeURIComponent(path));
    if (!resolved.startsWith(ROOT) || !existsSync(resolved)) {
      dead.push(`${page} -> ${target} (no such file: ${relative(ROOT, resolved)})`);
    } else if (fragment && resolved.endsWith(".md") && !anchors(resolved).has(fragment)) {
      dead.push(`${page} -> ${target} (no heading with that anchor)`);
    }
  }
  return dead;
}

describe("links in the README and docs/", () => {
  it("reads every page and finds its links", () => {
    expect(PAGES).toContain("docs/security-model.md");
    expect(linkTargets(readFileSync(join(ROOT, "README.md"), "utf8")).length).toBeGreaterThan(10);
  });

  it.each(PAGES)("%s: every relative link resolves", (page) => {
    expect(deadLinks(page)).toEqual([]);
  });

  it("the check itself reports a missing file and a missing heading", () => {
    expect(linkTargets("see [a](docs/nope.md) and ![b](x.png), not `[c](d)`\n```\n[e](f)\n```")).toEqual(["docs/nope.md", "x.png"]);
    expect(anchorOf("Known gaps (limits not enforced)")).toBe("known-gaps-limits-not-enforced");
    expect(anchorOf("Network on = the internet, never the host")).toBe("network-on--the-internet-never-the-host");
    expect(deadLinks("README.md", "[x](docs/nope.md) [y](docs/pool.md#nope) [z](docs/pool.md#configuration) [w](https://example.org/a)")).toEqual([
      "README.md -> docs/nope.md (no such file: docs/nope.md)",
      "README.md -> docs/pool.md#nope (no heading with that anchor)",
    ]);
  });
});
