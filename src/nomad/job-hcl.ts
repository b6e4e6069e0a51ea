/**
 * The sandbox job as HCL, rendered from the same resolved settings as `sandboxJob`, for
 * operators who prefer `nomad job run file.nomad.hcl` to the JSON API.
 */
import {
  HTTP_PORT_LABEL,
  IMAGE_VOLUME,
  IMAGE_VOLUME_PATH,
  KILL_TIMEOUT_NS,
  RESCHEDULE_POLICY,
  RESTART_POLICY,
  SANDBOX_GROUP,
  SANDBOX_TASK,
  hasCleanupTask,
  hostModeCleanupTask,
  httpPort,
  resolveSandboxJobOptions,
  taskConfig,
  taskEnv,
  type SandboxJobOptions,
  type SandboxJobSettings,
} from "./job.js";

export function sandboxJobHcl(options: SandboxJobOptions = {}): string {
  return sandboxJobHclFromSettings(resolveSandboxJobOptions(options));
}

export function sandboxJobHclFromSettings(s: SandboxJobSettings): string {
  const out = new HclWriter();
  out.open(`job ${str(s.jobId)}`);
  out.attrs([
    ["type", str("service")],
    ["datacenters", list(s.datacenters)],
    ...(s.namespace ? [["namespace", str(s.namespace)] as Attr] : []),
    ...(s.region ? [["region", str(s.region)] as Attr] : []),
    ...(s.nodePool ? [["node_pool", str(s.nodePool)] as Attr] : []),
  ]);
  for (const c of s.constraints) {
    out.blank();
    out.open("constraint");
    out.attrs([["attribute", str(c.attribute)], ["operator", str(c.operator)], ...(c.value !== undefined ? [["value", str(c.value)] as Attr] : [])]);
    out.close();
  }
  for (const sp of s.spreads) {
    out.blank();
    out.open("spread");
    out.attrs([["attribute", str(sp.attribute)], ["weight", String(sp.weight ?? 50)]]);
    for (const t of sp.targets ?? []) {
      out.open(`target ${str(t.value)}`);
      out.attrs([["percent", String(t.percent)]]);
      out.close();
    }
    out.close();
  }
  out.blank();
  out.line("# max_parallel = 0: no deployments, so scaling is never blocked by one (see src/nomad/job.ts).");
  out.open("update");
  out.attrs([["max_parallel", "0"]]);
  out.close();
  out.blank();
  // Map syntax, not a block: meta keys contain dots, which HCL2 block attributes may not.
  out.map("meta", s.meta);
  out.blank();
  out.open(`group ${str(SANDBOX_GROUP)}`);
  out.attrs([["count", String(s.count)]]);
  out.blank();
  out.open("network");
  const port = httpPort(s);
  if (port.To !== undefined) {
    out.open(`port ${str(HTTP_PORT_LABEL)}`);
    out.attrs([["to", String(port.To)]]);
    out.close();
  } else {
    out.line(`port ${str(HTTP_PORT_LABEL)} {}`);
  }
  out.close();
  out.blank();
  out.open("restart");
  out.attrs([
    ["attempts", String(RESTART_POLICY.Attempts)],
    ["interval", str(duration(RESTART_POLICY.Interval))],
    ["delay", str(duration(RESTART_POLICY.Delay))],
    ["mode", str(RESTART_POLICY.Mode)],
  ]);
  out.close();
  out.blank();
  out.open("reschedule");
  out.attrs([
    ["unlimited", String(RESCHEDULE_POLICY.Unlimited)],
    ["delay", str(duration(RESCHEDULE_POLICY.Delay))],
    ["delay_function", str(RESCHEDULE_POLICY.DelayFunction)],
    ["max_delay", str(duration(RESCHEDULE_POLICY.MaxDelay))],
  ]);
  out.close();
  out.blank();
  if (s.imageDiskMb !== undefined) {
    out.line("# Task images live here (docs/images.md); sticky: a replacement on this node keeps them.");
    out.open("ephemeral_disk");
    out.attrs([["size", String(s.imageDiskMb)], ["sticky", "true"]]);
    out.close();
    out.blank();
  }
  if (s.imageHostVolume !== undefined) {
    out.line("# Task images live in this host volume (the client's host_volume block), one store per allocation index.");
    out.open(`volume ${str(IMAGE_VOLUME)}`);
    out.attrs([["type", str("host")], ["source", str(s.imageHostVolume)], ["read_only", "false"]]);
    out.close();
    out.blank();
  }
  out.open(`task ${str(SANDBOX_TASK)}`);
  out.attrs([["driver", str(s.driver)], ["kill_timeout", str(duration(KILL_TIMEOUT_NS))]]);
  out.blank();
  out.open("config");
  out.attrs(Object.entries(taskConfig(s)).map(([k, v]) => [k, value(v)] as Attr));
  out.close();
  out.blank();
  if (s.imageHostVolume !== undefined) {
    out.open("volume_mount");
    out.attrs([["volume", str(IMAGE_VOLUME)], ["destination", str(IMAGE_VOLUME_PATH)], ["read_only", "false"]]);
    out.close();
    out.blank();
  }
  out.line("# Plain env for development; in production render it from a Nomad Variable or Vault.");
  out.map("env", taskEnv(s));
  out.blank();
  out.open("resources");
  out.attrs([["cpu", String(s.cpu)], ["memory", String(s.memoryMb)]]);
  out.close();
  out.close(); // task
  if (hasCleanupTask(s)) {
    const c = hostModeCleanupTask();
    out.blank();
    out.line("# Removes the allocation's workspaces once the server has stopped (raw_exec without an image).");
    out.open(`task ${str(c.name)}`);
    out.attrs([["driver", str("raw_exec")]]);
    out.blank();
    out.open("lifecycle");
    out.attrs([["hook", str("poststop")], ["sidecar", "false"]]);
    out.close();
    out.blank();
    out.open("config");
    out.attrs([["command", value(c.command)], ["args", value(c.args)]]);
    out.close();
    out.blank();
    out.open("resources");
    out.attrs([["cpu", String(c.cpu)], ["memory", String(c.memoryMb)]]);
    out.close();
    out.close(); // task
  }
  out.close(); // group
  out.close(); // job
  return out.text();
}

type Attr = [string, string];

class HclWriter {
  private lines: string[] = [];
  private depth = 0;

  line(text: string): void {
    this.lines.push("  ".repeat(this.depth) + text);
  }
  blank(): void {
    this.lines.push("");
  }
  open(header: string): void {
    this.line(`${header} {`);
    this.depth++;
  }
  close(): void {
    this.depth--;
    this.line("}");
  }
  attrs(attrs: Attr[]): void {
    const width = Math.max(0, ...attrs.map(([k]) => k.length));
    for (const [k, v] of attrs) this.line(`${k.padEnd(width)} = ${v}`);
  }
  map(name: string, entries: Record<string, string>): void {
    this.line(`${name} = {`);
    this.depth++;
    const keys = Object.keys(entries).map(str);
    const width = Math.max(0, ...keys.map((k) => k.length));
    Object.values(entries).forEach((v, i) => this.line(`${keys[i]!.padEnd(width)} = ${str(v)}`));
    this.depth--;
    this.line("}");
  }
  text(): string {
    return this.lines.join("\n") + "\n";
  }
}

/** An HCL string literal. `${...}` is kept: Nomad resolves attr/NOMAD_* interpolations at runtime. */
function str(v: string): string {
  return `"${v.replace(/\\/g, "\\\\").replace(/"/g, '\\"').replace(/\n/g, "\\n").replace(/%\{/g, "%%{")}"`;
}

function list(items: string[]): string {
  return `[${items.map(str).join(", ")}]`;
}

function value(v: unknown): string {
  if (typeof v === "string") return str(v);
  if (typeof v === "number" || typeof v === "boolean") return String(v);
  if (Array.isArray(v)) return `[${v.map(value).join(", ")}]`;
  // An object constructor, e.g. one of the docker driver's `devices`.
  if (typeof v === "object" && v !== null) return `{ ${Object.entries(v).map(([k, x]) => `${k} = ${value(x)}`).join(", ")} }`;
  throw new Error(`cannot render ${typeof v} as HCL`);
}

/** Nanoseconds as a Go duration string ("30m", "5s", "1500ms"). */
export function duration(ns: number): string {
  if (ns % 3600e9 === 0) return `${ns / 3600e9}h`;
  if (ns % 60e9 === 0) return `${ns / 60e9}m`;
  if (ns % 1e9 === 0) return `${ns / 1e9}s`;
  if (ns % 1e6 === 0) return `${ns / 1e6}ms`;
  return `${ns}ns`;
}
