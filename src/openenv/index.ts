/** The trainers' environment protocols: any AgentEnv as an OpenEnv environment, its tools over MCP, rollouts on a trainer's model. */
export { OpenEnvServer, type OpenEnvServerOptions } from "./server.js";
export { EpisodeHost } from "./episode-host.js";
export { Episode, SUBMIT_TOOL, type ListedTool, type ToolStep } from "./episode.js";
export { ItemSource, type ItemSelector, type SelectedItem } from "./item-source.js";
export { EpisodeIds } from "./episode-ids.js";
export { DEFAULT_LIMITS, ServerLimitsSchema, type ServerLimits } from "./limits.js";
export { ModelUrlPolicy, ModelUrlRefusedError, ModelUrlAllowError } from "./model-url.js";
export { FrameBudget, type FrameAccount } from "./frame-budget.js";
export { McpHttp } from "./mcp-http.js";
export { Session, type Frame } from "./session.js";
export { runRollout, parseRunRequest, type RunAnswer, type RunBounds, type RunRequest, type RunTurn } from "./rollout.js";
export { failureKindOf, nemoGymVerifyResponse } from "./nemo-gym.js";
export { createMcpServer, DirectTransport, type McpBinding } from "./mcp.js";
export { OpenEnvError, ActionValidationError, CapacityReachedError, EpisodeInfraError, NoEpisodeError, NoItemError, WS_ERROR_CODES, type WsErrorCode } from "./errors.js";
