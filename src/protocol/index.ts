export * from "./tool.js";
export * from "./sandbox.js";
export * from "./executor.js";
export * from "./errors.js";
export * from "./tool-table.js";
