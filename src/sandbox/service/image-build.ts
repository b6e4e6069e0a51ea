import { createReadStream } from "node:fs";
import { join } from "node:path";
import type { Logger } from "pino";
import { findExecutable } from "../../host/executables.js";
import { SlotpoolError } from "../../protocol/errors.js";
import type { BuildFailureCode, BuildStep, ImageBuildEvent } from "../../protocol/image-build.js";
import type { ImageBuildRequestSchema } from "../../protocol/image-build.js";
import type { ProcessEvent } from "../../protocol/process-session.js";
import type { ResetResponse } from "../../protocol/sandbox.js";
import type { z } from "zod";
import type { Slot } from "../core/slot.js";
import { BuildContexts } from "../images/build-contexts.js";
import { layerFromUpper } from "../images/build-layer.js";
import { BuildLayout, stepKey, type LayoutImage } from "../images/build-layout.js";
import { IMAGE_TOOLS_BIN } from "../images/image-tools.js";
import type { SlotImages } from "../images/slot-images.js";
import { skopeoPush } from "../images/skopeo.js";
import type { ProcessSessions } from "../tools/process-sessions.js";
import { copyScript, userScript, workdirScript } from "./build-scripts.js";

/**
 * `POST /images/build` (protocol/image-build.ts): E2B's template steps run one by one in a
 * slot the caller holds. Before each step that runs something the slot is reset into the
 * image so far, so the step runs as any command of that image would (its root, the slot's
 * isolation, the slot's network namespace with network on, as root or the step's user);
 * what it changed (the slot's upper layer) becomes the next image's layer (build-layer.ts),
 * written to the build layout (build-layout.ts) under the step's cache key. A step whose key
 * the layout holds is not run again. ENV and ARG change the config only.
 *
 * Context as E2B's builder keeps it: the user (root until a USER step), the working directory
 * (unset until a WORKDIR step: the user's home) and the environment (the base image's Env,
 * then ENV steps): the config of each step's image, so a cached step's successors find it.
 */

type Request = z.output<typeof ImageBuildRequestSchema>;

export interface ImageBuildHost {
  readonly images: SlotImages;
  readonly processes: ProcessSessions;
  readonly stateDir: string;
  readonly logger: Logger;
  reset(slot: Slot, template?: string, image?: string): Promise<ResetResponse>;
  /** HOST:PORT of registries that may be plain HTTP (a push's destination too). */
  readonly insecureRegistries: readonly string[];
}

/** A build that failed: why, by a stable code (protocol/image-build.ts), and at which step. */
export class BuildFailure extends SlotpoolError {
  override name = "BuildFailure";
  declare readonly code: BuildFailureCode;
  constructor(
    code: BuildFailureCode,
    message: string,
    readonly step: string,
  ) {
    super(message, { code });
  }
}

/** Label of a build image: its working directory was never set (E2B: the user's home). */
const WORKDIR_UNSET = "dev.slotpool.build.workdir-unset";

export class ImageBuilds {
  readonly layout: BuildLayout;
  readonly contexts: BuildContexts;
  /** Steps run and reused, all builds (tests and the bench read them). */
  stepsRun = 0;
  stepsCached = 0;

  constructor(private readonly host: ImageBuildHost) {
    this.layout = new BuildLayout(join(host.stateDir, "builds"));
    this.contexts = new BuildContexts(join(host.stateDir, "build-contexts"), 4 * 1024 * 1024 * 1024);
  }

  async build(slot: Slot, req: Request, emit: (ev: ImageBuildEvent) => void, signal: AbortSignal): Promise<void> {
    const started = performance.now();
    const store = this.host.images.store;
    if (!store) throw new BuildFailure("BUILD_BASE_UNAVAILABLE", `image builds need task images, which this server cannot give: ${this.host.images.reason ?? "unknown reason"}`, "base");
    const deadline = Date.now() + req.timeout * 1000;
    // The base image: fetched into the store, copied into the layout (once per digest).
    let parent: LayoutImage;
    try {
      const { image } = await store.get(req.from);
      parent = await this.layout.importFromStore(`b-${image.digest.slice(7)}`, image.dir, store.blobsDir, findExecutable("skopeo") ?? "skopeo");
    } catch (err) {
      throw new BuildFailure("BUILD_BASE_UNAVAILABLE", `the base image ${req.from}: ${err instanceof Error ? err.message : String(err)}`, "base");
    }
    let forced = req.force;
    let cached = 0;
    for (const [index, step] of req.steps.entries()) {
      if (signal.aborted) throw new BuildFailure("BUILD_CANCELLED", "the build was cancelled", String(index));
      if (Date.now() > deadline) throw new BuildFailure("BUILD_TIMEOUT", `the build took longer than its ${req.timeout} s`, String(index));
      forced ||= step.force;
      const key = stepKey(parent.digest, step);
      const tag = `s-${key}`;
      const have = forced ? undefined : await this.layout.image(tag);
      emit({ type: "step", index, step: describe(step), cached: have !== undefined });
      if (have) {
        cached++;
        this.stepsCached++;
        parent = have;
        continue;
      }
      this.stepsRun++;
      parent = await this.runStep(slot, parent, step, index, tag, req, emit, signal);
    }
    // Finalize: the working directory a sandbox starts in (the user's home when never set).
    const finalKey = stepKey(parent.digest, { type: "FINALIZE", args: [] });
    let final = await this.layout.image(`f-${finalKey}`);
    if (!final) {
      const ctx = contextOf(parent);
      let workingDir = ctx.workdir;
      if (workingDir === undefined) {
        await this.resetInto(slot, parent, "finalize");
        const home = await this.run(slot, ctx, 'printf %s "$HOME"', { index: undefined, emit: () => undefined, signal, allowNetwork: false });
        workingDir = home.output.trim() || "/";
      }
      final = await this.layout.derive(parent, `f-${finalKey}`, { env: ctx.env, user: ctx.user, workingDir, createdBy: "slotpool build: finalize", labels: { [WORKDIR_UNSET]: "" } });
    }
    const reference = this.layout.reference(final.tag);
    let pushed: string | undefined;
    if (req.push) {
      emit({ type: "log", level: "info", message: `Pushing the image to ${req.push}` });
      try {
        await skopeoPush(reference, req.push, this.host.insecureRegistries);
      } catch (err) {
        throw new BuildFailure("BUILD_PUSH_FAILED", `pushing the image to ${req.push}: ${err instanceof Error ? err.message : String(err)}`, "finalize");
      }
      pushed = req.push;
    }
    const c = final.config.config ?? {};
    emit({
      type: "done",
      digest: final.digest,
      reference,
      ...(pushed ? { pushed } : {}),
      steps: req.steps.length,
      cached_steps: cached,
      build_ms: Math.round(performance.now() - started),
      user: c.User || "root",
      working_dir: c.WorkingDir || "/",
    });
  }

  private async resetInto(slot: Slot, image: LayoutImage, step: string): Promise<void> {
    try {
      await this.host.reset(slot, undefined, this.layout.reference(image.tag));
    } catch (err) {
      throw new BuildFailure("BUILD_FAILED", `starting the step in the image so far: ${err instanceof Error ? err.message : String(err)}`, step);
    }
  }

  private async runStep(slot: Slot, parent: LayoutImage, step: BuildStep, index: number, tag: string, req: Request, emit: (ev: ImageBuildEvent) => void, signal: AbortSignal): Promise<LayoutImage> {
    const ctx = contextOf(parent);
    const at = String(index);
    const env = [...ctx.env];
    const createdBy = `slotpool build: ${describe(step)}`;
    if (step.type === "ENV" || step.type === "ARG") {
      if (step.args.length % 2 !== 0) throw new BuildFailure("BUILD_INVALID_STEP", `${step.type} takes pairs of name and value, got ${step.args.length} arguments`, at);
      for (let i = 0; i < step.args.length; i += 2) setEnv(env, step.args[i]!, expand(step.args[i + 1]!, env));
      return this.layout.derive(parent, tag, { env, user: ctx.user, workingDir: ctx.workdir ?? "", createdBy, labels: { [WORKDIR_UNSET]: ctx.workdir === undefined ? "1" : "" } });
    }
    await this.resetInto(slot, parent, at);
    const o = { index, emit, signal, allowNetwork: req.allow_network };
    let user = ctx.user;
    let workdir = ctx.workdir;
    if (step.type === "RUN") {
      const command = step.args[0];
      if (!command) throw new BuildFailure("BUILD_INVALID_STEP", "RUN needs a command", at);
      await this.mustRun(slot, { ...ctx, user: step.args[1] || ctx.user }, command, o, at);
    } else if (step.type === "WORKDIR") {
      const arg = step.args[0];
      if (!arg) throw new BuildFailure("BUILD_INVALID_STEP", "WORKDIR needs a path", at);
      workdir = arg.startsWith("/") ? arg : join(ctx.workdir ?? "/", arg);
      await this.mustRun(slot, { ...ctx, user: "root", workdir: "/" }, workdirScript(workdir, ctx.user), o, at);
    } else if (step.type === "USER") {
      const name = step.args[0];
      if (!name) throw new BuildFailure("BUILD_INVALID_STEP", "USER needs a user name", at);
      await this.mustRun(slot, { ...ctx, user: "root", workdir: "/" }, userScript(name), o, at);
      user = name;
    } else if (step.type === "COPY") {
      await this.copy(slot, ctx, step, o, at);
    }
    const upper = this.host.images.upperOf(slot);
    if (!upper) throw new BuildFailure("BUILD_FAILED", "the build slot's root is no image", at);
    const layer = await layerFromUpper(upper, this.layout.blobDir, (id, kind) => this.host.images.insideOf(slot, id, kind));
    return this.layout.derive(parent, tag, { layer, env, user, workingDir: workdir ?? "", createdBy, labels: { [WORKDIR_UNSET]: workdir === undefined ? "1" : "" } });
  }

  private async copy(slot: Slot, ctx: BuildContext, step: BuildStep, o: RunOptions, at: string): Promise<void> {
    const [src, dest, owner, mode] = step.args;
    if (!src || !dest) throw new BuildFailure("BUILD_INVALID_STEP", "COPY needs a source and a destination", at);
    if (!step.files_hash) throw new BuildFailure("BUILD_INVALID_STEP", "COPY needs the hash of its files (files_hash)", at);
    if (!this.contexts.has(step.files_hash)) throw new BuildFailure("BUILD_FILES_MISSING", `COPY's files (hash ${step.files_hash}) were not uploaded`, at);
    const unpack = `/tmp/slotpool-copy-${step.files_hash.slice(0, 16)}`;
    const bb = `${IMAGE_TOOLS_BIN}/busybox`;
    // The files into the slot's /tmp (its own disk, never part of the layer), through the command's stdin.
    await this.mustRun(slot, { ...ctx, user: "root", workdir: "/" }, `${bb} rm -rf ${unpack} && ${bb} mkdir -p ${unpack} && ${bb} tar -xzf - -C ${unpack}`, { ...o, stdin: this.contexts.path(step.files_hash) }, at);
    const ownerArg = owner ? (owner.includes(":") ? owner : `${owner}:${owner}`) : `${ctx.user}:${ctx.user}`;
    await this.mustRun(slot, { ...ctx, user: "root", workdir: "/" }, copyScript({ source: `${unpack}/${copySource(src)}`, target: dest, owner: ownerArg, mode: mode ?? "", workdir: ctx.workdir, user: ctx.user }), o, at);
  }

  private async mustRun(slot: Slot, ctx: BuildContext, command: string, o: RunOptions, at: string): Promise<void> {
    const r = await this.run(slot, ctx, command, o);
    // A user the image lacks: E2B's builder (envd) refuses the command with this message, before it runs.
    if (r.code === 126 && r.output.includes(`unable to find user ${ctx.user}: no matching entries in passwd file`)) {
      throw new BuildFailure("BUILD_STEP_FAILED", `failed to run command '${command}': command failed: unauthenticated: invalid username: '${ctx.user}'`, at);
    }
    if (r.code !== 0) {
      const tail = r.output.trim().split("\n").slice(-5).join("\n");
      throw new BuildFailure("BUILD_STEP_FAILED", `command '${command.length > 200 ? `${command.slice(0, 197)}...` : command}' failed with exit code ${r.code}${tail ? `: ${tail}` : ""}`, at);
    }
  }

  /** One command in the slot as a process session (`/bin/bash -l -c`, as E2B's builder runs them), its output as log lines. */
  private async run(slot: Slot, ctx: BuildContext, command: string, o: RunOptions): Promise<{ code: number; output: string }> {
    const envs = Object.fromEntries(ctx.env.map((e) => [e.slice(0, e.indexOf("=")), e.slice(e.indexOf("=") + 1)]).filter(([k]) => /^[A-Za-z_][A-Za-z0-9_]*$/.test(k!)));
    const cd = ctx.workdir === undefined ? 'cd -- "$HOME" 2>/dev/null || cd /; ' : "";
    const session = await this.host.processes.startWhenSettled(slot, {
      cmd: "/bin/bash",
      args: ["-l", "-c", cd + command],
      envs,
      cwd: ctx.workdir ?? "/",
      stdin: o.stdin !== undefined,
      allowNetwork: o.allowNetwork,
      user: ctx.user,
    });
    let output = "";
    const lines = new LineSplitter((line) => o.emit({ type: "log", ...(o.index !== undefined ? { index: o.index } : {}), level: "info", message: line }));
    const ended = new Promise<ProcessEvent>((resolve) => {
      session.listeners.add({
        event(ev) {
          if (ev.type === "stdout" || ev.type === "stderr") {
            const text = Buffer.from(ev.data, "base64").toString("utf8");
            output = (output + text).slice(-64 * 1024);
            lines.push(text);
          } else if (ev.type === "end") resolve(ev);
          return false;
        },
        onDrain() {},
      });
      if (session.ended) resolve(session.ended);
    });
    const abort = (): void => void session.signal("SIGKILL").catch(() => undefined);
    o.signal.addEventListener("abort", abort, { once: true });
    try {
      if (o.stdin !== undefined) {
        for await (const chunk of createReadStream(o.stdin, { highWaterMark: 1 << 20 })) await session.write(chunk as Buffer);
        session.closeStdin();
      }
      const end = await ended;
      lines.flush();
      if (end.type !== "end") return { code: -1, output };
      return { code: end.exit_code === -1 && end.signal ? 128 : end.exit_code, output: output + (end.error ? `\n${end.error}` : "") };
    } finally {
      o.signal.removeEventListener("abort", abort);
    }
  }
}

interface RunOptions {
  index: number | undefined;
  emit: (ev: ImageBuildEvent) => void;
  signal: AbortSignal;
  allowNetwork: boolean;
  /** A file fed to the command's stdin. */
  stdin?: string;
}

interface BuildContext {
  user: string;
  /** Unset: the user's home (E2B's builder). */
  workdir: string | undefined;
  env: string[];
}

function contextOf(image: LayoutImage): BuildContext {
  const c = image.config.config ?? {};
  const unset = c.Labels?.[WORKDIR_UNSET];
  // A base image (no label yet): E2B's builder starts as root in root's home, whatever the image says.
  const isBase = unset === undefined;
  return { user: isBase ? "root" : c.User || "root", workdir: isBase || unset === "1" || !c.WorkingDir ? undefined : c.WorkingDir, env: Array.isArray(c.Env) ? c.Env : [] };
}

/** The part of a COPY source before its first glob (E2B's builder: the client resolved the pattern into the uploaded files). */
export function copySource(src: string): string {
  const s = src.replace(/^\.\//, "");
  const glob = s.search(/[*?[{]/);
  if (glob < 0) return s.replace(/\/+$/, "") || ".";
  const cut = s.lastIndexOf("/", glob);
  return cut <= 0 ? "." : s.slice(0, cut);
}

function describe(step: BuildStep): string {
  const args = step.type === "ENV" || step.type === "ARG" ? step.args.filter((_, i) => i % 2 === 0).map((k) => `${k}=…`) : step.args.filter(Boolean);
  const text = `${step.type} ${args.join(" ")}`;
  return text.length > 200 ? `${text.slice(0, 197)}...` : text;
}

function setEnv(env: string[], name: string, value: string): void {
  const i = env.findIndex((e) => e.startsWith(`${name}=`));
  if (i >= 0) env[i] = `${name}=${value}`;
  else env.push(`${name}=${value}`);
}

/** `$NAME` and `${NAME}` replaced from `env` (Docker's ENV expansion; unknown names are empty). */
function expand(value: string, env: string[]): string {
  const get = (n: string): string => env.find((e) => e.startsWith(`${n}=`))?.slice(n.length + 1) ?? "";
  return value.replace(/\\\$|\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)/g, (m, a: string | undefined, b: string | undefined) => (m === "\\$" ? "$" : get(a ?? b ?? "")));
}

class LineSplitter {
  private buf = "";
  constructor(private readonly out: (line: string) => void) {}
  push(text: string): void {
    this.buf += text;
    let nl: number;
    while ((nl = this.buf.indexOf("\n")) >= 0) {
      this.out(this.buf.slice(0, nl));
      this.buf = this.buf.slice(nl + 1);
    }
    if (this.buf.length > 8192) this.flush();
  }
  flush(): void {
    if (this.buf) this.out(this.buf);
    this.buf = "";
  }
}

