/** The Atropos trainer side (`slotpool/atropos`): its HTTP client, the group filter, the env manager loop. */
export * from "./config.js";
export * from "./client.js";
export * from "./group-filter.js";
export * from "./env-manager.js";
export { pythonJsonDumps } from "./python-json.js";
