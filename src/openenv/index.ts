/** The trainers' environment protocols: any AgentEnv as an OpenEnv environment, its tools over MCP, rollouts on a trainer's model. */
export { OpenEnvServer, type OpenEnvServerOptions } from "./server.js";
export { EpisodeHost } from "./episode-host.js";
export { Episode, SUBMIT_TOOL, type ListedTool, type ToolStep } from "./episode.js";
export { ItemSource, type ItemSelector } from "./item-source.js";
export { Session, type Frame } from "./session.js";
export { runRollout, parseRunRequest, type RunAnswer, type RunRequest, type RunTurn } from "./rollout.js";
export { createMcpServer, DirectTransport, type McpBinding } from "./mcp.js";
export { OpenEnvError, ActionValidationError, CapacityReachedError, EpisodeInfraError, NoEpisodeError, NoItemError, WS_ERROR_CODES, type WsErrorCode } from "./errors.js";
