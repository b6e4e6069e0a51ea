/** slotpool's public API. */
export * from "./protocol/index.js";
export * from "./pool/errors.js";
export type * from "./pool/types.js";
