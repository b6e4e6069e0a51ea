import { readFileSync } from "node:fs";
import { expect } from "vitest";
import type { ExecuteResponse } from "../../src/protocol/sandbox.js";
import { descendants } from "../../src/sandbox/run/process-barrier.js";
import { findChromium } from "../../src/sandbox/tools/browser/chromium.js";
import type { TestServer } from "./helpers.js";

/** Debian's Chromium (scripts/setup.sh installs it): the browser tests need the real one. */
export const chromium = findChromium();

/** A 2×1 PNG (browser_get_images reports its natural size). */
const PNG = "iVBORw0KGgoAAAANSUhEUgAAAAIAAAABCAIAAAB7QOjdAAAAD0lEQVR4nGP4z8DA8J8BAAf/Af8Bf4mnAAAAAElFTkSuQmCC";

/**
 * The small web app the tests browse, served from the slot's own 127.0.0.1 by its terminal
 * (`python3 -m http.server`, started with `bash_stateful`, as a task's setup would). `tag`
 * names the slot in what its store page writes (cookie, localStorage).
 */
export function siteFiles(tag: string): Record<string, string> {
  return {
    "index.html": `<!doctype html><title>Shop</title><h1>Welcome</h1>
<form action="done.html" method="get"><label>Name <input name="name"></label> <button type="submit">Send</button></form>
<a href="page2.html">Second page</a> <img src="logo.png" alt="Logo">
<button onclick="document.querySelector('h1').insertAdjacentHTML('afterend', '<p>A note</p>')">Add note</button>
<div style="height:4000px"></div><p>Bottom of page</p>
<script>addEventListener("scroll", () => { document.title = "Shop scrolled " + (scrollY > 0 ? "down" : "top"); });</script>`,
    "done.html": `<!doctype html><title>Done</title><h1 id="r"></h1><script>document.getElementById("r").textContent = "Hello " + new URLSearchParams(location.search).get("name");</script>`,
    "page2.html": `<!doctype html><title>Second</title><h1>Second page</h1>`,
    "keys.html": `<!doctype html><title>Keys</title><input autofocus aria-label="Box"><p id="k">no key yet</p><script>addEventListener("keydown", (e) => { document.getElementById("k").textContent = "got key " + e.key; });</script>`,
    "store.html": `<!doctype html><title>Store</title><p id="c"></p><p id="s"></p><script>
if (location.search === "?set") { document.cookie = "who=${tag}; path=/"; localStorage.setItem("k", "${tag}"); }
document.getElementById("c").textContent = "cookie " + (document.cookie || "none");
document.getElementById("s").textContent = "storage " + (localStorage.getItem("k") || "none");</script>`,
  };
}

/** Writes the site into the slot's workspace and serves it on the slot's 127.0.0.1:`port` from its terminal; resolves once it answers. */
export async function serveSite(s: TestServer, slot: number, port: number, tag = `slot${slot}`): Promise<void> {
  for (const [name, content] of Object.entries(siteFiles(tag))) {
    const w = await s.post("/execute", { slot_id: `slot_${slot}`, tool: "write_file", args: { path: `site/${name}`, content } });
    expect(w.json?.success, w.text).toBe(true);
  }
  const png = await s.post("/execute", { slot_id: `slot_${slot}`, tool: "write_file", args: { path: "site/logo.png", content: PNG, encoding: "base64" } });
  expect(png.json?.success, png.text).toBe(true);
  const started = await tool(s, slot, "bash_stateful", {
    command: `python3 -m http.server ${port} --bind 127.0.0.1 --directory /workspace/site >/dev/null 2>&1 &
for i in $(seq 300); do (exec 3<>/dev/tcp/127.0.0.1/${port}) 2>/dev/null && exit 0; sleep 0.1; done; echo "the site did not come up"; exit 1`,
    timeout: 60,
  });
  expect(started.success, started.output + started.error).toBe(true);
}

/** One tool call on `slot_<slot>` (HTTP 200 asserted). */
export async function tool(s: TestServer, slot: number, name: string, args: Record<string, unknown> = {}, envelope: Record<string, unknown> = {}): Promise<ExecuteResponse> {
  const r = await s.post("/execute", { slot_id: `slot_${slot}`, tool: name, args, ...envelope });
  expect(r.status, r.text).toBe(200);
  return r.json as ExecuteResponse;
}

/** The ref a snapshot gives the line matching `line` (e.g. /textbox "Name"/), as `@eN`. */
export function refIn(snapshot: string, line: RegExp): string {
  const m = snapshot.split("\n").find((l) => line.test(l))?.match(/\[ref=([a-z0-9]+)\]/);
  if (!m) throw new Error(`no ref for ${line} in:\n${snapshot}`);
  return `@${m[1]}`;
}

/** The sandbox server's own pid (its listening line; the process the test started may be a namespace wrapper). */
export function serverPid(s: TestServer): number {
  const line = s.logs.find((l) => l.includes('"msg":"listening"'));
  const pid = line ? (JSON.parse(line) as { pid?: number }).pid : undefined;
  if (!pid) throw new Error("the server's listening line names no pid");
  return pid;
}

function cmdline(pid: number): string {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0").join(" ");
  } catch {
    return "";
  }
}

/** The processes of a slot's browser: its Chromium (marked `--slotpool-slot=<id>`) and everything below it, among the server's descendants. */
export function browserProcesses(s: TestServer, slot: number): number[] {
  // Chromium itself, not the bubblewrap processes around it (their command lines hold its arguments too).
  const main = descendants(serverPid(s)).filter((p) => /^\S*chrom[^ ]* /.test(cmdline(p)) && cmdline(p).includes(`--slotpool-slot=slot_${slot} `));
  return main.flatMap((p) => [p, ...descendants(p)]);
}

/** Whether a process still runs (a zombie does not). */
export function running(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    const state = stat.slice(stat.lastIndexOf(")") + 2, stat.lastIndexOf(")") + 3);
    return state !== "Z" && state !== "X";
  } catch {
    return false;
  }
}

/** A `/proc/<pid>/status` field. */
export function statusField(pid: number, field: string): string | undefined {
  try {
    return new RegExp(`^${field}:\\s*(.*)$`, "m").exec(readFileSync(`/proc/${pid}/status`, "utf8"))?.[1]?.trim();
  } catch {
    return undefined;
  }
}

/**
 * A browser test's time limit. A Chromium start costs about a CPU-second and a loaded 2-core
 * box stretches it to several (first browser calls of 9–15 s were measured at load 16); the
 * tests wait for events, this bound only ends a hang.
 */
export const BROWSER_TEST = { timeout: 120_000 };
