import { z } from "zod";
import { registryHostProblem } from "../protocol/images.js";

/**
 * The `images` section of an env config and of every server that starts sandbox servers
 * (executor-server, e2b-server, openenv-server): how the sandbox servers the provisioners
 * start fetch task images (docs/images.md). Credentials are not here: they reach the servers
 * from the environment (`SLOTPOOL_REGISTRY_AUTH`, `REGISTRY_AUTH_FILE`) or an auth file on
 * their host, never a config file or a command line (docs/images.md, "Credentials").
 */
export const ImageSettingsSchema = z
  .object({
    /**
     * Registries (`HOST[:PORT]`) that may answer plain HTTP: each sandbox server the pool
     * starts gets `--insecure-registry` for each (every other registry must speak TLS).
     */
    insecureRegistries: z
      .array(
        z.string().superRefine((host, ctx) => {
          const problem = registryHostProblem(host);
          if (problem) ctx.addIssue({ code: "custom", message: problem });
        }),
      )
      .default([]),
    /**
     * Registries whose images are fetched from a mirror instead (`REGISTRY=MIRROR`, e.g.
     * `docker.io=mirror.local:5000`): each sandbox server gets `--registry-mirror` for each.
     */
    registryMirrors: z
      .array(
        z.string().superRefine((v, ctx) => {
          const [from, to, ...rest] = v.split("=");
          const problem = !from || !to || rest.length > 0 ? `'${v}' is not REGISTRY=MIRROR` : (registryHostProblem(from) ?? registryHostProblem(to));
          if (problem) ctx.addIssue({ code: "custom", message: problem });
        }),
      )
      .default([]),
    /** Each container's image store budget, MB (`--image-budget-mb`): images no slot uses are evicted LRU above it. Default: the server's (20480), on Nomad the store's disk less a margin. */
    budgetMb: z.number().int().min(1).optional(),
    /** Longest fetch of one image, and unpack of one layer, seconds (`--image-pull-timeout`; the server's default 1800). */
    pullTimeoutS: z.number().int().min(1).optional(),
  })
  .strict();

export type ImageSettings = z.output<typeof ImageSettingsSchema>;
export type ImageSettingsInput = z.input<typeof ImageSettingsSchema>;

/** The environment variable holding a Docker-style registry auth document that sandbox servers read (docs/images.md). */
export const REGISTRY_AUTH_ENV = "SLOTPOOL_REGISTRY_AUTH";

/** The sandbox-server flags of these settings (no secret is ever among them: `ps` shows them). */
export function imageServerArgs(settings: Partial<ImageSettings> | undefined): string[] {
  if (!settings) return [];
  return [
    ...(settings.insecureRegistries ?? []).flatMap((h) => ["--insecure-registry", h]),
    ...(settings.registryMirrors ?? []).flatMap((m) => ["--registry-mirror", m]),
    ...(settings.budgetMb !== undefined ? ["--image-budget-mb", String(settings.budgetMb)] : []),
    ...(settings.pullTimeoutS !== undefined ? ["--image-pull-timeout", String(settings.pullTimeoutS)] : []),
  ];
}
