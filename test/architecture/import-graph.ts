import { readdirSync, readFileSync } from "node:fs";
import { dirname, join, relative, resolve, sep } from "node:path";
import ts from "typescript";

/**
 * The import graph of src/ and the layer rules it must keep. Kept apart from the test so a
 * test can feed the rules a made-up graph and watch them fail.
 *
 * Rooms (top-level folders of src/) and what each may import, besides itself:
 *
 *   protocol                  nothing (the wire format's single source)
 *   http, observability, host protocol (shared rooms underneath everything; host holds facts
 *                             about the machine, e.g. which paths other uids can reach)
 *   sandbox                   protocol + shared rooms (it runs in the container, alone)
 *   nomad                     protocol + shared rooms
 *   pool                      nomad and below
 *   tools                     protocol + shared rooms (tool definitions, used by the executor
 *                             and the agent; knows nothing of slots)
 *   executor                  pool, tools and below
 *   e2b                       pool and below (the E2B-compatible API: one slot lease per
 *                             E2B sandbox; beside the executor, not above it)
 *   agent                     tools and below (the model loop; the env drives it)
 *   report                    protocol + shared rooms (reads JSONL, renders the HTML report)
 *   env                       executor, agent, report and below
 *   openenv                   env and below (the trainers' protocols: OpenEnv, MCP, POST /run
 *                             over an AgentEnv)
 *   cli                       everything
 *   index.ts (the root file)  everything (the public API)
 */
export const ALLOWED: Record<string, readonly string[]> = {
  protocol: [],
  http: ["protocol"],
  observability: ["protocol"],
  host: ["protocol"],
  report: ["protocol", "http", "observability", "host"],
  sandbox: ["protocol", "http", "observability", "host"],
  nomad: ["protocol", "http", "observability", "host"],
  pool: ["nomad", "protocol", "http", "observability", "host"],
  tools: ["protocol", "http", "observability", "host"],
  executor: ["pool", "tools", "nomad", "protocol", "http", "observability", "host"],
  e2b: ["pool", "nomad", "protocol", "http", "observability", "host"],
  agent: ["tools", "protocol", "http", "observability", "host"],
  env: ["report", "executor", "agent", "pool", "tools", "nomad", "protocol", "http", "observability", "host"],
  openenv: ["env", "report", "executor", "agent", "pool", "tools", "nomad", "protocol", "http", "observability", "host"],
  cli: ["openenv", "e2b", "report", "env", "executor", "agent", "pool", "tools", "nomad", "sandbox", "protocol", "http", "observability", "host"],
  "": ["openenv", "e2b", "report", "env", "executor", "agent", "pool", "tools", "nomad", "protocol", "http", "observability", "host"],
};

/**
 * Sub-rooms of src/sandbox/ (its folders) and which other sub-rooms each may import, from
 * the bottom up. The sandbox server runs alone in its container, so these rules order its
 * parts the way the rooms order src/:
 *
 *   core        nothing (a slot and its call queue, the room's errors, a tool's raw answer)
 *   run         core (one process to completion, its capped output, the reset barrier)
 *   native      core (the C helpers and their build at first use)
 *   isolation   run, native, core (bubblewrap, limits, cgroups, network, the spawner, uids)
 *   workspace   isolation and below (slot disks, mounts, tree removal, what runners need of the host)
 *   images      workspace and below (task images: the image store, each slot's image root)
 *   templates   images and below (template store, builds, a slot's view of one)
 *   tools       images and below (bash, the terminal, files, artifacts, process sessions;
 *               beside templates, not above them)
 *   fork        tools, templates and below (POST /fork copies a slot's workspace and terminal)
 *   service     everything below (SandboxService composes the slots, tools, templates, forks)
 *   http        service and below (the server, its routes, the WebSocket)
 *   index.ts    the room's public face, at its root: may import any sub-room; no other file
 *               lives at the root, and no sub-room imports it.
 */
export const SANDBOX_ALLOWED: Record<string, readonly string[]> = {
  core: [],
  run: ["core"],
  native: ["core"],
  isolation: ["run", "native", "core"],
  workspace: ["isolation", "run", "native", "core"],
  images: ["workspace", "isolation", "run", "native", "core"],
  templates: ["images", "workspace", "isolation", "run", "native", "core"],
  tools: ["images", "workspace", "isolation", "run", "native", "core"],
  fork: ["tools", "templates", "images", "workspace", "isolation", "run", "native", "core"],
  service: ["fork", "tools", "templates", "images", "workspace", "isolation", "run", "native", "core"],
  http: ["service", "fork", "tools", "templates", "images", "workspace", "isolation", "run", "native", "core"],
  "": ["http", "service", "fork", "tools", "templates", "images", "workspace", "isolation", "run", "native", "core"],
};

/** Files allowed at the root of src/sandbox/ (outside any sub-room). */
export const SANDBOX_ROOT_FILES: readonly string[] = ["sandbox/index.ts"];

/** file (relative to src/, with "/" separators) -> files it imports (same form). */
export type ImportGraph = Map<string, string[]>;

function sourceFiles(dir: string): string[] {
  const out: string[] = [];
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) out.push(...sourceFiles(path));
    else if (entry.name.endsWith(".ts") && !entry.name.endsWith(".d.ts")) out.push(path);
  }
  return out;
}

/** Every relative import (static, type-only, re-export and dynamic) of every .ts file under srcDir. */
export function readImportGraph(srcDir: string): ImportGraph {
  const graph: ImportGraph = new Map();
  const rel = (p: string) => relative(srcDir, p).split(sep).join("/");
  for (const file of sourceFiles(srcDir)) {
    const info = ts.preProcessFile(readFileSync(file, "utf8"), true, true);
    const targets = info.importedFiles
      .map((f) => f.fileName)
      .filter((name) => name.startsWith("."))
      .map((name) => rel(resolve(dirname(file), name.replace(/\.js$/, ".ts"))));
    graph.set(rel(file), [...new Set(targets)]);
  }
  return graph;
}

/** The room a file lives in: its top-level folder under src/, or "" for files at the root. */
export function roomOf(file: string): string {
  const slash = file.indexOf("/");
  return slash < 0 ? "" : file.slice(0, slash);
}

/** Imports that cross rooms against ALLOWED, as "from -> to" lines. */
export function layerViolations(graph: ImportGraph, allowed = ALLOWED): string[] {
  const out: string[] = [];
  for (const [from, targets] of graph) {
    const room = roomOf(from);
    const ok = allowed[room];
    for (const to of targets) {
      const target = roomOf(to);
      if (target === room) continue;
      if (ok === undefined || !ok.includes(target)) out.push(`${from} -> ${to} (${room || "root"} may not import ${target || "root"})`);
    }
  }
  return out.sort();
}

/** Import cycles between files, each as "a -> b -> ... -> a" (one per strongly connected group). */
export function importCycles(graph: ImportGraph): string[] {
  // Tarjan's strongly connected components; any component with more than one file, or a
  // file importing itself, is a cycle.
  let index = 0;
  const idx = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const cycles: string[] = [];
  const visit = (v: string): void => {
    idx.set(v, index);
    low.set(v, index);
    index++;
    stack.push(v);
    onStack.add(v);
    for (const w of graph.get(v) ?? []) {
      if (!idx.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (onStack.has(w)) {
        low.set(v, Math.min(low.get(v)!, idx.get(w)!));
      }
    }
    if (low.get(v) === idx.get(v)) {
      const group: string[] = [];
      let w: string;
      do {
        w = stack.pop()!;
        onStack.delete(w);
        group.push(w);
      } while (w !== v);
      if (group.length > 1 || (graph.get(v) ?? []).includes(v)) cycles.push([...group.sort(), group[0]].join(" -> "));
    }
  };
  for (const v of graph.keys()) if (!idx.has(v)) visit(v);
  return cycles.sort();
}

/** The sub-room of a file under sandbox/: its folder there, or "" for a file at sandbox/'s root. */
export function sandboxRoomOf(file: string): string {
  const rest = file.slice("sandbox/".length);
  const slash = rest.indexOf("/");
  return slash < 0 ? "" : rest.slice(0, slash);
}

/**
 * Imports between sandbox sub-rooms against SANDBOX_ALLOWED, plus files at sandbox/'s root
 * other than the public face, as lines naming the file and the rule.
 */
export function sandboxLayerViolations(graph: ImportGraph, allowed = SANDBOX_ALLOWED, rootFiles = SANDBOX_ROOT_FILES): string[] {
  const out: string[] = [];
  for (const [from, targets] of graph) {
    if (!from.startsWith("sandbox/")) continue;
    const room = sandboxRoomOf(from);
    if (room === "" && !rootFiles.includes(from)) out.push(`${from} (is in no sandbox sub-room: move it into one)`);
    const ok = allowed[room];
    for (const to of targets) {
      if (!to.startsWith("sandbox/")) continue;
      const target = sandboxRoomOf(to);
      if (target === room) continue;
      if (ok === undefined || !ok.includes(target)) out.push(`${from} -> ${to} (sandbox/${room || "index.ts"} may not import sandbox/${target || "index.ts"})`);
    }
  }
  return out.sort();
}
