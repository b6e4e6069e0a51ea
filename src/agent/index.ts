export * from "./messages.js";
export * from "./errors.js";
export * from "./chat-client.js";
export * from "./hermes-prompt.js";
export * from "./policy.js";
export * from "./model-policy.js";
export * from "./oracle-policy.js";
export * from "./agent-loop.js";
