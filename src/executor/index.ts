/** The executor room: ToolExecutor, the executor HTTP service, the ToolServer and its client. */
export type { ExecuteOptions, ExecutorStats, ToolExecutorLike } from "./types.js";
export { ToolExecutor, ExecutorClosedError, type ToolExecutorOptions } from "./tool-executor.js";
export {
  ToolExecutorConfigSchema,
  ToolExecutorConfigError,
  parseToolExecutorConfig,
  clampTimeoutS,
  MIN_TIMEOUT_S,
  MAX_TIMEOUT_S,
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
  loadToolModule,
  ToolModuleError,
  type ExternalTool,
  type ExternalToolContext,
  type ExternalToolOutput,
} from "./external-tool.js";
export { ExecutorMetrics } from "./executor-metrics.js";
