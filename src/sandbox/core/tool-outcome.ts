import type { ExecuteResponse } from "../../protocol/sandbox.js";

/** A tool's answer before the service stamps it with the call's execution id. */
export type ToolOutcome = Omit<ExecuteResponse, "execution_id">;

/**
 * Receives a streaming call's output as it is produced. Returning a promise asks the
 * producer to stop reading the command's output until it resolves (a slow WebSocket
 * reader): the command then blocks on its own stdout instead of the server buffering.
 */
export type OnChunk = (stream: "stdout" | "stderr", chunk: string) => void | Promise<void>;
