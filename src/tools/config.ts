import { z } from "zod";

/**
 * Which tools the model is offered: the `tools` section of an env config, in the names
 * `resolveGroupTools` takes (toolsets.ts, distributions.ts).
 */
export const ToolsConfigSchema = z.object({
  /** Toolsets offered to the model; ignored when `distribution` is set. */
  enabled: z.array(z.string().min(1)).default(["default"]),
  /** Toolsets taken out of `enabled`. */
  disabled: z.array(z.string().min(1)).default([]),
  /** A toolset distribution, sampled once per group (instead of `enabled`). */
  distribution: z.string().min(1).optional(),
});

export type ToolsConfig = z.output<typeof ToolsConfigSchema>;
export type ToolsConfigInput = z.input<typeof ToolsConfigSchema>;
