import { HttpError } from "../../http/errors.js";
import { IMAGE_FAILURE_STATUS, IMAGE_UNAVAILABLE, type ImageFailureReason } from "../../protocol/images.js";

/**
 * An image could not be had (pulled, unpacked, stored, or images are not available here):
 * the infrastructure's failure, never the trajectory's. Answered as
 * `{"error", "field": "image", "code": "image_unavailable", "reason", "image"}` with the
 * status of its reason (protocol/images.ts), so clients classify it by `code`.
 */
export class ImageUnavailableError extends HttpError {
  override name = "ImageUnavailableError";
  constructor(
    readonly reason: ImageFailureReason,
    readonly reference: string,
    message: string,
    field = "image",
  ) {
    super(IMAGE_FAILURE_STATUS[reason], message, field, { code: IMAGE_UNAVAILABLE, reason, image: reference });
  }
}
