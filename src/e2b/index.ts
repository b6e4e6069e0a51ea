/** The E2B-compatible server (`slotpool/e2b`). Listed by name (guarded by test/architecture/public-api.test.ts). */
export { E2bServer, type E2bServerOptions } from "./server.js";
export { SandboxRegistry, BASE_TEMPLATE, DEFAULT_TIMEOUT_S, type E2bPool, type E2bSandbox, type CreateSandbox } from "./sandboxes.js";
export { E2bApiError, E2bUnsupportedError } from "./errors.js";
export { ENVD_VERSION } from "./control-plane.js";
