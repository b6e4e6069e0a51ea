import { randomBytes } from "node:crypto";
import type { BuildFailureCode } from "../../protocol/image-build.js";
import { E2bApiError } from "../errors.js";

/**
 * The E2B templates this server built through E2B's template API (template-api.ts): each
 * template has an id, its names (E2B's names, formerly aliases) and its builds; a build has a
 * status, its log entries, and once ready the image it made (an image reference every
 * container of the pool can fetch: template-builds.ts) with the template's start and ready
 * commands and its default user and working directory. Tags name builds (`name:tag`); a new
 * build of a name moves its `default` tag (and the tags asked for) to itself once it is ready.
 * Kept in memory: templates live as long as the server (the images stay in the containers'
 * build layouts and the registry, and a rebuild after a restart reuses every cached step).
 */

export type BuildStatus = "waiting" | "building" | "ready" | "error";

export interface LogEntry {
  timestamp: string;
  level: "debug" | "info" | "warn" | "error";
  message: string;
  step?: string;
}

export interface TemplateBuild {
  readonly id: string;
  readonly templateId: string;
  status: BuildStatus;
  readonly logs: LogEntry[];
  /** Why it failed: the SDK's BuildError message, the failing step, and the stable code (protocol/image-build.ts). */
  reason?: { message: string; step?: string; code: BuildFailureCode };
  /** What the build was asked for (the SDK's tags, cpu and memory are recorded, not enforced). */
  readonly tags: string[];
  readonly createdAt: Date;
  /** Set when ready. */
  image?: string;
  startCmd?: string;
  readyCmd?: string;
  user?: string;
  workdir?: string;
  /** Steps the build reused from the cache, of all. */
  cachedSteps?: number;
  steps?: number;
}

export interface BuiltTemplate {
  readonly id: string;
  readonly names: Set<string>;
  readonly builds: Map<string, TemplateBuild>;
  /** tag → build id. */
  readonly tags: Map<string, string>;
  readonly createdAt: Date;
  updatedAt: Date;
}

/** What a sandbox of a built template starts from. */
export interface TemplateLaunch {
  templateId: string;
  buildId: string;
  image: string;
  startCmd?: string | undefined;
  readyCmd?: string | undefined;
  user?: string | undefined;
  workdir?: string | undefined;
}

export const DEFAULT_TAG = "default";
const NAME_RE = /^[a-z0-9][a-z0-9._-]{0,127}(?:\/[a-z0-9][a-z0-9._-]{0,127})?$/;
const TAG_RE = /^[A-Za-z0-9._-]{1,128}$/;

/** `name[:tag]` taken apart; a 400 naming the problem. */
export function parseTemplateName(raw: string, field = "name"): { name: string; tag: string | undefined } {
  const colon = raw.lastIndexOf(":");
  const name = colon > 0 ? raw.slice(0, colon) : raw;
  const tag = colon > 0 ? raw.slice(colon + 1) : undefined;
  if (!NAME_RE.test(name)) throw new E2bApiError(400, `${field} '${raw.slice(0, 200)}' is not a template name (lower-case letters, digits, '.', '_', '-')`, field);
  if (tag !== undefined && !TAG_RE.test(tag)) throw new E2bApiError(400, `${field} '${raw.slice(0, 200)}' has an invalid tag`, field);
  return { name, tag };
}

export class BuiltTemplates {
  private readonly byId = new Map<string, BuiltTemplate>();
  private readonly byName = new Map<string, BuiltTemplate>();

  /** A new build of template `name` (made if new), waiting for its start. */
  request(name: string, tags: string[]): { template: BuiltTemplate; build: TemplateBuild } {
    let template = this.byName.get(name);
    if (!template) {
      const id = "tpl" + randomBytes(8).toString("hex");
      template = { id, names: new Set([name]), builds: new Map(), tags: new Map(), createdAt: new Date(), updatedAt: new Date() };
      this.byId.set(id, template);
      this.byName.set(name, template);
    }
    const build: TemplateBuild = { id: randomUuid(), templateId: template.id, status: "waiting", logs: [], tags, createdAt: new Date() };
    template.builds.set(build.id, build);
    template.updatedAt = new Date();
    return { template, build };
  }

  /** By id or name. */
  get(idOrName: string): BuiltTemplate | undefined {
    return this.byId.get(idOrName) ?? this.byName.get(idOrName);
  }

  build(templateId: string, buildId: string): TemplateBuild {
    const t = this.get(templateId);
    const b = t?.builds.get(buildId);
    if (!t) throw new E2bApiError(404, `template '${templateId}' not found`);
    if (!b) throw new E2bApiError(404, `build '${buildId}' of template '${templateId}' not found`);
    return b;
  }

  list(): BuiltTemplate[] {
    return [...this.byId.values()];
  }

  names(): string[] {
    return [...this.byName.keys()];
  }

  /** A finished build: ready ones take their tags. */
  finished(build: TemplateBuild): void {
    const t = this.byId.get(build.templateId);
    if (!t || build.status !== "ready") return;
    for (const tag of new Set([DEFAULT_TAG, ...build.tags])) t.tags.set(tag, build.id);
    t.updatedAt = new Date();
  }

  delete(idOrName: string): boolean {
    const t = this.get(idOrName);
    if (!t) return false;
    this.byId.delete(t.id);
    for (const n of t.names) this.byName.delete(n);
    return true;
  }

  /**
   * What `Sandbox.create(ref)` starts from when `ref` names a built template: `name`, `id`,
   * `name:tag` or `name:<build id>` (Harbor names builds so). Undefined when it names none of
   * them (the caller tries its other kinds of template); a template without such a ready build
   * is E2B's 404 ("tag … does not exist for template …"), which callers wait on.
   */
  resolve(ref: string): TemplateLaunch | undefined {
    const colon = ref.lastIndexOf(":");
    const direct = this.get(ref);
    const t = direct ?? (colon > 0 ? this.get(ref.slice(0, colon)) : undefined);
    if (!t) return undefined;
    const tag = direct ? DEFAULT_TAG : ref.slice(colon + 1);
    const buildId = t.tags.get(tag) ?? (t.builds.has(tag) ? tag : undefined);
    const b = buildId ? t.builds.get(buildId) : undefined;
    if (!b || b.status !== "ready" || !b.image) throw new E2bApiError(404, `tag '${tag}' does not exist for template '${[...t.names][0] ?? t.id}'${b ? ` (its build is ${b.status})` : ""}`);
    return { templateId: t.id, buildId: b.id, image: b.image, startCmd: b.startCmd, readyCmd: b.readyCmd, user: b.user, workdir: b.workdir };
  }
}

function randomUuid(): string {
  const b = randomBytes(16);
  b[6] = (b[6]! & 0x0f) | 0x40;
  b[8] = (b[8]! & 0x3f) | 0x80;
  const h = b.toString("hex");
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}
