/**
 * The executor room (`slotpool/executor`): ToolExecutor and its config, the one backend
 * (createToolBackend), the executor HTTP service, the ToolServer, its client and external
 * tools. Listed by name (guarded by test/architecture/public-api.test.ts).
 */
export type { ExecuteOptions, ExecutorStats, ToolExecutorLike } from "./types.js";
export { ToolExecutor, ExecutorClosedError, type ToolExecutorOptions } from "./tool-executor.js";
export {
  ToolExecutorConfigSchema,
  ToolExecutorConfigError,
  parseToolExecutorConfig,
  type ToolExecutorConfig,
  type ToolExecutorConfigInput,
} from "./config.js";
export {
  ToolBackendConfigSchema,
  ToolBackendConfigError,
  parseToolBackendConfig,
  type ToolBackendConfig,
  type ToolBackendConfigInput,
} from "./backend-config.js";
export { createToolBackend, type ToolBackendOptions, type ToolBackendParts } from "./tool-backend.js";
export { ExecutorServer, type ExecutorServerOptions } from "./executor-server.js";
export { ToolServer, type ToolServerOptions } from "./tool-server.js";
export { ToolServerClient, ToolServerError, type ToolServerCall } from "./tool-server-client.js";
export {
  defineExternalTool,
  ToolModuleError,
  type ExternalTool,
  type ExternalToolContext,
  type ExternalToolOutput,
} from "./external-tool.js";
