import { spawn, type ChildProcess } from "node:child_process";
import { slotpoolCommand } from "../../../src/pool/slotpool-command.js";
import { makeTestTls, opensslMissing, type TestTls } from "../../support/test-tls.js";

/** `slotpool e2b-server` started as a user starts it (the built CLI, its defaults, a free port). */
export interface E2bServerProcess {
  url: string;
  /** Its HTTPS URL (when openssl could make a certificate): the port of the domain it hands out, localhost:<port>. */
  tlsUrl: string | undefined;
  /** The CA that signed its certificate (for NODE_EXTRA_CA_CERTS / SSL_CERT_FILE). */
  tls: TestTls | undefined;
  apiKey: string;
  child: ChildProcess;
  logs(): string;
  stop(): Promise<void>;
}

/**
 * With `https` (the default where openssl exists), it also serves HTTPS with a certificate for
 * `*.e2b.localhost` from a throwaway CA: the domain it then hands out is `e2b.localhost:<https port>`,
 * so `https://getHost(port)` (E2B's tests of ports) reaches it once `*.localhost` resolves to
 * loopback (localhost-dns.ts, python/slotpool_localhost.py) and the CA is trusted.
 */
export async function startE2bServerProcess(extra: string[] = [], options: { https?: boolean } = {}): Promise<E2bServerProcess> {
  const apiKey = `e2b_${"0".repeat(8)}${Math.random().toString(16).slice(2).padEnd(32, "0").slice(0, 32)}`;
  const { command, args } = slotpoolCommand();
  const tls = (options.https ?? true) && !opensslMissing ? makeTestTls("e2b.localhost") : undefined;
  const tlsArgs = tls ? ["--tls-cert", tls.certFile, "--tls-key", tls.keyFile] : [];
  // Its CA file is named in the environment of every test process started meanwhile (some start late): removed at exit.
  if (tls) process.once("exit", () => tls.remove());
  const child = spawn(command, [...args, "e2b-server", "--port", "0", ...tlsArgs, ...extra], {
    env: { ...process.env, E2B_API_KEY: apiKey },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let logs = "";
  const exited = new Promise<number | null>((r) => child.once("exit", (code) => r(code)));
  let tlsUrl: string | undefined;
  const url = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`e2b-server printed no "listening" line within 90 s:\n${logs}`)), 90_000);
    const onData = (d: Buffer) => {
      logs += d.toString();
      for (const line of logs.split("\n")) {
        if (!line.includes('"msg":"listening"') || !line.includes('"name":"e2b-server"')) continue;
        clearTimeout(timer);
        const listening = JSON.parse(line) as { url: string; tls_url?: string };
        tlsUrl = listening.tls_url;
        resolve(listening.url);
      }
    };
    child.stdout!.on("data", onData);
    child.stderr!.on("data", onData);
    void exited.then((code) => { clearTimeout(timer); reject(new Error(`e2b-server exited ${code}:\n${logs}`)); });
  });
  return {
    url,
    tlsUrl,
    tls,
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
