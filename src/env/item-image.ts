import type { TemplateSpec } from "../pool/types.js";
import { imageReferenceProblem } from "../protocol/images.js";
import { EnvError } from "./errors.js";

/**
 * An item's task image (its `workspaceTemplate(item).image`) cannot name an image: the env's
 * mistake, found before any slot is asked for it (at the group's start, or before an
 * evaluation's first item). The CLI exits 2 with this message, as for any usage error.
 */
export class ItemImageError extends EnvError {
  override name = "ItemImageError";
  constructor(
    readonly image: string,
    readonly problem: string,
    envName: string,
  ) {
    super(`env ${envName}: an item's workspaceTemplate names the image ${JSON.stringify(image.slice(0, 200))}, which ${problem}; fix the env's items (docs/images.md names the reference forms)`);
  }
}

/** `template` as the env gave it, once its image (if any) is checked; throws ItemImageError for a reference that cannot name an image. */
export function checkedTemplate(template: TemplateSpec | undefined, envName: string): TemplateSpec | undefined {
  if (template?.image === undefined) return template;
  if (typeof template.image !== "string") throw new ItemImageError(String(template.image), "is not a string", envName);
  const problem = imageReferenceProblem(template.image);
  if (problem) throw new ItemImageError(template.image, problem, envName);
  return template;
}
