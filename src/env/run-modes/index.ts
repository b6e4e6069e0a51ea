export * from "./process.js";
export * from "./serve.js";
export * from "./evaluate.js";
export * from "./summary.js";
export * from "./progress.js";
export * from "./output-path.js";
