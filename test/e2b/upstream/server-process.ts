import { spawn, type ChildProcess } from "node:child_process";
import { slotpoolCommand } from "../../../src/pool/slotpool-command.js";

/** `slotpool e2b-server` started as a user starts it (the built CLI, its defaults, a free port). */
export interface E2bServerProcess {
  url: string;
  apiKey: string;
  child: ChildProcess;
  logs(): string;
  stop(): Promise<void>;
}

export async function startE2bServerProcess(extra: string[] = []): Promise<E2bServerProcess> {
  const apiKey = `e2b_${"0".repeat(8)}${Math.random().toString(16).slice(2).padEnd(32, "0").slice(0, 32)}`;
  const { command, args } = slotpoolCommand();
  const child = spawn(command, [...args, "e2b-server", "--port", "0", ...extra], {
    env: { ...process.env, E2B_API_KEY: apiKey },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let logs = "";
  const exited = new Promise<number | null>((r) => child.once("exit", (code) => r(code)));
  const url = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`e2b-server printed no "listening" line within 90 s:\n${logs}`)), 90_000);
    const onData = (d: Buffer) => {
      logs += d.toString();
      for (const line of logs.split("\n")) {
        if (!line.includes('"msg":"listening"') || !line.includes('"name":"e2b-server"')) continue;
        clearTimeout(timer);
        resolve((JSON.parse(line) as { url: string }).url);
      }
    };
    child.stdout!.on("data", onData);
    child.stderr!.on("data", onData);
    void exited.then((code) => { clearTimeout(timer); reject(new Error(`e2b-server exited ${code}:\n${logs}`)); });
  });
  return {
    url,
    apiKey,
    child,
    logs: () => logs,
    async stop() {
      if (child.exitCode !== null) return;
      child.kill("SIGTERM");
      const timer = setTimeout(() => child.kill("SIGKILL"), 30_000);
      await exited;
      clearTimeout(timer);
    },
  };
}
