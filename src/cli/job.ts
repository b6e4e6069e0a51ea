import { CliUsageError } from "./usage.js";

// Placeholder until this subcommand's issue lands; replaced, not extended.
export async function run(_argv: string[]): Promise<number> {
  throw new CliUsageError("this command is not available in this build yet");
}
