/** The sandbox room (`slotpool/sandbox`): the in-container server that splits a container into slots. */
export { SandboxServer, type SandboxServerOptions } from "./http/server.js";
export { DEFAULT_LIMITS, type CommandLimits } from "./isolation/limits.js";
