import { imageReferenceProblem, parseImageReference } from "../protocol/images.js";
import { ImageReferenceError } from "./errors.js";

/**
 * The routing key of a task image reference: what skopeo would fetch (`python:3.12` and
 * `docker.io/library/python:3.12` are one image). Throws ImageReferenceError for a reference
 * that cannot name an image.
 */
export function imageKey(image: string): string {
  const problem = imageReferenceProblem(image);
  if (problem) throw new ImageReferenceError(image, problem);
  return parseImageReference(image).skopeo;
}
