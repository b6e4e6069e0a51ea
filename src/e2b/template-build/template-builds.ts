import type { Logger } from "../../observability/logger.js";
import { SlotpoolError } from "../../protocol/errors.js";
import { BUILD_FAILURE_CODES, type BuildFailureCode, type BuildStep, type ImageBuildEvent } from "../../protocol/image-build.js";
import { buildInSlot, hasBuildContext, putBuildContext } from "../../pool/slot-image-build.js";
import type { E2bPool } from "../sandboxes.js";
import type { BuiltTemplates, LogEntry, TemplateBuild } from "./built-templates.js";
import type { TemplateFiles } from "./template-files.js";

/**
 * Runs E2B template builds on the pool: a slot is acquired (on a container holding the base
 * image if one does), the build's files are uploaded to its sandbox server, and the steps run
 * there (`POST /images/build`: each step a cached image layer, network on as E2B's builder).
 * The result is an image reference the template's sandboxes start from:
 * - with a template registry (`--template-registry HOST[:PORT]/PREFIX`), the image is pushed
 *   there as `PREFIX/<template id>:<build id>` and every container fetches it from there (any
 *   host: Nomad);
 * - without one, it is the building server's build layout (`oci:<dir>:<tag>`), which every
 *   container on the same host can read (the local provisioner's containers).
 */

export interface TemplateBuildsOptions {
  pool: E2bPool;
  templates: BuiltTemplates;
  files: TemplateFiles;
  logger: Logger;
  /** HOST[:PORT][/PREFIX] built images are pushed to (docs/e2b.md, "Templates"). */
  registry?: string | undefined;
  /** What E2B's `fromTemplate('base')` / the SDK's default base image is (default `e2bdev/base`: Docker Hub, or its mirror). */
  baseImage?: string | undefined;
  /** Allow builds' commands the internet (E2B's builder has it); default true. */
  allowNetwork?: boolean | undefined;
}

export interface BuildStart {
  fromImage?: string | undefined;
  fromTemplate?: string | undefined;
  force: boolean;
  steps: BuildStep[];
  startCmd?: string | undefined;
  readyCmd?: string | undefined;
}

export const DEFAULT_BASE_IMAGE = "e2bdev/base";

/** A build refused before its steps reached a sandbox server (its base template unknown, its files never uploaded). */
export class TemplateBuildError extends SlotpoolError {
  override name = "TemplateBuildError";
  declare readonly code: BuildFailureCode;
  constructor(code: BuildFailureCode, message: string) {
    super(message, { code });
  }
}

/** The stable code of what ended a build: its own, a sandbox server's (`error` event), else the infrastructure's. */
function failureCode(code: unknown): BuildFailureCode {
  return BUILD_FAILURE_CODES.find((c) => c === code) ?? "BUILD_FAILED";
}

export class TemplateBuilds {
  /** Builds under way, so a server shutdown can end them. */
  private readonly running = new Set<AbortController>();

  constructor(private readonly o: TemplateBuildsOptions) {}

  /** Starts `build` (answers at once; its status and logs say how it goes). */
  start(build: TemplateBuild, req: BuildStart): void {
    if (build.status !== "waiting") return;
    build.status = "building";
    const abort = new AbortController();
    this.running.add(abort);
    void this.run(build, req, abort.signal)
      .catch((err: unknown) => this.fail(build, err instanceof Error ? err.message : String(err), "base", abort.signal.aborted ? "BUILD_CANCELLED" : failureCode(err instanceof TemplateBuildError ? err.code : undefined)))
      .finally(() => this.running.delete(abort));
  }

  private log(build: TemplateBuild, message: string, level: LogEntry["level"] = "info", step?: string): void {
    build.logs.push({ timestamp: new Date().toISOString(), level, message, ...(step !== undefined ? { step } : {}) });
    // A build's log is bounded: the oldest lines go first.
    if (build.logs.length > 20_000) build.logs.splice(0, build.logs.length - 20_000);
  }

  private fail(build: TemplateBuild, message: string, step: string | undefined, code: BuildFailureCode): void {
    if (build.status !== "building") return;
    build.status = "error";
    build.reason = { message, ...(step !== undefined ? { step } : {}), code };
    this.log(build, message, "error", step);
    this.o.logger.info({ template: build.templateId, build: build.id, step, code, error: message }, "template build failed");
  }

  private baseOf(req: BuildStart): string {
    if (req.fromTemplate) {
      if (req.fromTemplate === "base") return this.o.baseImage ?? DEFAULT_BASE_IMAGE;
      const launch = this.o.templates.resolve(req.fromTemplate);
      if (!launch) throw new TemplateBuildError("BUILD_BASE_UNAVAILABLE", `template '${req.fromTemplate}' not found: build it first`);
      return launch.image;
    }
    return req.fromImage!;
  }

  private async run(build: TemplateBuild, req: BuildStart, signal: AbortSignal): Promise<void> {
    const from = this.baseOf(req);
    this.log(build, `Building template ${build.templateId}/${build.id} from ${req.fromTemplate ? `template ${req.fromTemplate}` : from}`);
    const slot = await this.o.pool.acquire({ trajectoryId: `e2b-build-${build.id}`, image: from });
    try {
      for (const hash of new Set(req.steps.flatMap((s) => (s.files_hash ? [s.files_hash] : [])))) {
        const path = this.o.files.path(hash);
        if (!path) throw new TemplateBuildError("BUILD_FILES_MISSING", `the files of hash ${hash} were never uploaded (GET /templates/{id}/files/{hash} gives the upload URL)`);
        if (!(await hasBuildContext(slot, hash))) await putBuildContext(slot, hash, path);
      }
      const push = this.o.registry ? `${this.o.registry}/${build.templateId}:${build.id}` : undefined;
      const last = await buildInSlot(
        slot,
        { from, steps: req.steps, force: req.force, allow_network: this.o.allowNetwork ?? true, ...(push ? { push } : {}) },
        (ev: ImageBuildEvent) => {
          if (ev.type === "step") this.log(build, `${ev.cached ? "CACHED " : ""}[${ev.index + 1}/${req.steps.length}] ${ev.step}`, "info", String(ev.index));
          else if (ev.type === "log") this.log(build, ev.message, ev.level, ev.index !== undefined ? String(ev.index) : undefined);
        },
        signal,
      );
      if (last.type === "error") return this.fail(build, last.message, last.step, signal.aborted ? "BUILD_CANCELLED" : failureCode(last.code));
      if (last.type !== "done") return this.fail(build, "the build ended without a result", "finalize", "BUILD_FAILED");
      build.image = last.pushed ?? last.reference;
      build.user = last.user;
      build.workdir = last.working_dir;
      build.startCmd = req.startCmd || undefined;
      build.readyCmd = req.readyCmd || undefined;
      build.steps = last.steps;
      build.cachedSteps = last.cached_steps;
      this.log(build, `Build finished in ${(last.build_ms / 1000).toFixed(1)} s: ${last.cached_steps} of ${last.steps} steps from the cache; image ${build.image}`, "info", "finalize");
      // Ready and its tags in place at once: the SDK's poll that sees "ready" may be followed
      // at once by a build `fromTemplate` this one or a create by its name, while the slot's
      // release (a reset) below still runs.
      build.status = "ready";
      this.o.templates.finished(build);
      this.o.logger.info({ template: build.templateId, build: build.id, image: build.image, steps: last.steps, cached: last.cached_steps }, "template built");
    } finally {
      await this.o.pool.release(slot).catch(() => undefined);
    }
  }

  /** Ends the builds under way (server shutdown). */
  close(): void {
    for (const a of this.running) a.abort();
  }
}
