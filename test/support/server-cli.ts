/**
 * A `slotpool <server>` command started as a user starts it (the built CLI, `--port 0`), for
 * the tests of each server's command line: its child process, its output so far, its exit, and
 * the URL its "listening" log line names (a rejection with the output if it exits first).
 */
import { spawn } from "node:child_process";
import { slotpoolCommand } from "../../src/pool/slotpool-command.js";

export function startServerCli(server: string, argv: string[], env: NodeJS.ProcessEnv = {}, giveUpMs = 60_000) {
  const { command, args } = slotpoolCommand();
  const child = spawn(command, [...args, server, ...argv], { env: { ...process.env, ...env }, stdio: ["ignore", "pipe", "pipe"] });
  const state = { logs: "" };
  const exited = new Promise<number | null>((r) => child.once("exit", (code) => r(code)));
  const url = new Promise<string>((resolve, reject) => {
    // Only ends a hang: a server start on a loaded 2-core box takes seconds, not a minute.
    const timer = setTimeout(() => reject(new Error(`no listening line within ${giveUpMs / 1000} s:\n${state.logs}`)), giveUpMs);
    const onData = (d: Buffer) => {
      state.logs += d.toString();
      for (const line of state.logs.split("\n")) {
        if (!line.includes('"msg":"listening"') || !line.includes(`"name":"${server}"`)) continue;
        clearTimeout(timer);
        resolve((JSON.parse(line) as { url: string }).url);
      }
    };
    child.stderr.on("data", onData);
    child.stdout.on("data", onData);
    void exited.then((code) => reject(new Error(`exited ${code}:\n${state.logs}`)));
  });
  return { child, state, exited, url };
}
