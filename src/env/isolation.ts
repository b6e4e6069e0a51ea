import type { HealthResponse } from "../protocol/sandbox.js";

/** One container's /health answer as the pool got it, or why it could not be asked. */
export interface ContainerHealth {
  id: string;
  url: string;
  health?: HealthResponse;
  error?: string;
}

/**
 * What the run's slots were isolated by, from the sandbox servers' /health: each line one
 * fact, "2 of 2 containers" when servers differ. Read from the keys /health has
 * (bwrap_available, sandbox_unavailable_reason, limits.memory/pids/disk, internet, cgroups);
 * a key an older or newer server does not send reads "unknown", never a guess.
 */
export interface IsolationSummary {
  containers: number;
  /** Containers whose slots run inside bubblewrap. */
  sandboxed: number;
  /** "sandboxed (bubblewrap, seccomp filter, ptrace on)", or in words that slots ran unsandboxed (or unfiltered) and why. */
  sandbox: string;
  memory: string;
  pids: string;
  disk: string;
  network: string;
  /** Containers that did not answer /health. */
  unanswered: number;
}

export function summarizeIsolation(containers: readonly ContainerHealth[], options: { allowNetwork: boolean }): IsolationSummary {
  const answered = containers.filter((c) => c.health).map((c) => c.health!);
  const sandboxed = answered.filter((h) => h.bwrap_available).length;
  const unsandboxed = answered.filter((h) => !h.bwrap_available);
  const reasons = [...new Set(unsandboxed.map((h) => h.sandbox_unavailable_reason ?? "no reason given"))];
  const sandbox =
    answered.length === 0
      ? "unknown (no sandbox server answered /health)"
      : unsandboxed.length === 0
        ? `sandboxed (bubblewrap, ${syscallFilter(answered)})`
        : `UNSANDBOXED: slots on ${unsandboxed.length} of ${answered.length} containers ran without bubblewrap, with the server's own view of the host (${reasons.join("; ")})`;
  const limit = (pick: (l: Record<string, unknown>) => string | undefined) =>
    distinct(answered.map((h) => {
      const l = h["limits"];
      return l && typeof l === "object" ? (pick(l as Record<string, unknown>) ?? "unknown") : "unknown";
    }));
  const memory = limit((l) => (typeof l["memory"] === "string" ? ({ cgroup: "per-slot cgroup", rlimit_as_per_process: "RLIMIT_AS per process (no per-slot bound)", none: "none" } as Record<string, string>)[l["memory"]] ?? l["memory"] : undefined));
  const pids = limit((l) => (typeof l["pids"] === "string" ? ({ cgroup: "per-slot cgroup", rlimit_nproc_per_slot_uid: "RLIMIT_NPROC per slot uid", rlimit_nproc_shared_uid: "RLIMIT_NPROC shared by all slots" } as Record<string, string>)[l["pids"]] ?? l["pids"] : undefined));
  const disk = limit((l) => {
    const mb = typeof l["disk_mb"] === "number" ? ` ${l["disk_mb"]} MB` : "";
    if (l["disk"] === "workspace_and_tmp") return `workspace and /tmp on a tmpfs of${mb}`;
    if (l["disk"] === "tmp_only") return `only /tmp bounded (${mb.trim() || "?"} each); the workspace is not`;
    return undefined;
  });
  const network = options.allowNetwork
    ? distinct(answered.map((h) => (h.internet === "slirp4netns" ? "allowed (user-mode network, slirp4netns)" : h.internet === "unavailable" ? `loopback only (${h.internet_unavailable_reason ?? "no internet here"})` : "unknown")))
    : "off (executor.allowNetwork false: loopback only)";
  return { containers: containers.length, sandboxed, sandbox, memory, pids, disk, network, unanswered: containers.length - answered.length };
}

/**
 * The task images a run's slots were reset into (the pool's record, pool/image-affinity.ts):
 * each with the resets into it and its digest, and what each first use on a container cost.
 */
export interface ImagesUsed {
  images: Array<{ image: string; resets: number; digest: string }>;
  fetches: Array<{ image: string; containerId: string; pull_ms: number; unpack_ms: number; pulled_bytes: number; layers: number; layers_reused: number }>;
}

/** The task images an env's backend saw (asked when the summary is written; undefined before the env starts, after it closes, or from a backend that cannot say). */
export function imagesOf(env: { readonly tools: { imagesUsed?(): ImagesUsed } }): ImagesUsed | undefined {
  try {
    return env.tools.imagesUsed?.();
  } catch {
    return undefined;
  }
}

/** The summary's and report's rows; with `images`, which root filesystem the slots ran (and what fetching each image cost). */
export function isolationRows(s: IsolationSummary, images?: ImagesUsed): Array<[string, string]> {
  return [
    ["isolation", `${s.sandbox}${s.containers > 1 ? ` · ${s.containers} containers` : ""}${s.unanswered ? ` · ${s.unanswered} did not answer /health` : ""}`],
    ["  memory / pids", `${s.memory} / ${s.pids}`],
    ["  disk", s.disk],
    ["  network", s.network],
    ...(images ? imageRows(images) : []),
  ];
}

/** "  root": the images the slots ran (or the sandbox image's own system); "  image fetches": each image's first use, per container. */
export function imageRows(used: ImagesUsed): Array<[string, string]> {
  if (used.images.length === 0) return [["  root", "the sandbox image's own system, read-only (no task image)"]];
  const root = used.images.map((i) => `${i.image}${i.digest ? ` (${i.digest.slice(0, 19)})` : ""}: ${i.resets} slot${i.resets === 1 ? "" : "s"}`).join("; ");
  const rows: Array<[string, string]> = [["  root", `task images, every path writable in a per-slot upper layer: ${root}`]];
  if (used.fetches.length > 0) {
    const fetches = used.fetches.map((f) => `${f.image}: pull ${seconds(f.pull_ms)} + unpack ${seconds(f.unpack_ms)}, ${(f.pulled_bytes / 1e6).toFixed(1)} MB, ${f.layers} layer${f.layers === 1 ? "" : "s"}${f.layers_reused ? ` (${f.layers_reused} shared)` : ""}`);
    rows.push(["  image fetches", `${fetches.join("; ")} (first use on ${new Set(used.fetches.map((f) => f.containerId)).size} container(s); later slots reset in place)`]);
  }
  return rows;
}

function seconds(ms: number): string {
  return `${(ms / 1000).toFixed(ms < 10_000 ? 2 : 1)} s`;
}

function distinct(values: string[]): string {
  const counts = new Map<string, number>();
  for (const v of values) counts.set(v, (counts.get(v) ?? 0) + 1);
  if (counts.size === 0) return "unknown";
  if (counts.size === 1) return [...counts.keys()][0]!;
  return [...counts.entries()].map(([v, n]) => `${v} (${n} of ${values.length} containers)`).join("; ");
}

/** The slots' seccomp filter from /health's `seccomp` and `ptrace` (issue 28); servers that do not say read "unknown". */
function syscallFilter(answered: readonly HealthResponse[]): string {
  const words = answered.map((h) => (h.seccomp === "filter" ? `seccomp filter, ptrace ${h.ptrace === false ? "off" : "on"}` : h.seccomp === "off" ? "UNFILTERED syscalls (--no-seccomp)" : "seccomp filter unknown"));
  return distinct(words);
}
