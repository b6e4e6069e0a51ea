import { CliUsageError } from "./usage.js";

// Placeholder until the env layer lands; replaced, not extended.
const unavailable = async (_argv: string[]): Promise<number> => {
  throw new CliUsageError("this command is not available in this build yet");
};
export const runProcess = unavailable;
export const runServe = unavailable;
export const runEvaluate = unavailable;
