import { execFile, spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";

const run = promisify(execFile);

/**
 * A real image registry on loopback for one test file: Debian's `docker-registry`
 * (github.com/docker/distribution), a free port, storage in a temp dir, stopped (and its dir
 * removed) by `stop`. Plain HTTP: a server reaches it only when started with
 * `--insecure-registry <host>`. With `auth`, it wants HTTP basic credentials (htpasswd).
 */
export interface TestRegistry {
  /** 127.0.0.1:PORT */
  host: string;
  /** What the registry logged (tests check no secret reaches a log). */
  logs: string[];
  stop(): Promise<void>;
}

/** The test registry's user and password when started with `auth` (the hash below is this password's, bcrypt). */
export const REGISTRY_USER = "tester";
export const REGISTRY_PASSWORD = "s3cret-Registry-Pass-7f3a";
const REGISTRY_HTPASSWD = `${REGISTRY_USER}:$2b$05$HgAb9o4JDEoARLTwWBAUn.UZjZtNYwJVExzqEtIHkU2zkXJaubgy.`;

export async function startRegistry(opts: { auth?: boolean } = {}): Promise<TestRegistry> {
  const dir = mkdtempSync(join(tmpdir(), "slotpool-registry-"));
  const htpasswd = join(dir, "htpasswd");
  if (opts.auth) writeFileSync(htpasswd, REGISTRY_HTPASSWD + "\n");
  const config = join(dir, "config.yml");
  writeFileSync(
    config,
    [
      "version: 0.1",
      "log:",
      "  level: info",
      "  accesslog:",
      "    disabled: true",
      "storage:",
      "  filesystem:",
      `    rootdirectory: ${join(dir, "data")}`,
      "  delete:",
      "    enabled: true",
      "http:",
      "  addr: 127.0.0.1:0",
      `  secret: ${Math.random().toString(36).slice(2)}`,
      ...(opts.auth ? ["auth:", "  htpasswd:", "    realm: slotpool-test", `    path: ${htpasswd}`] : []),
      "",
    ].join("\n"),
  );
  const child: ChildProcess = spawn("docker-registry", ["serve", config], { stdio: ["ignore", "pipe", "pipe"] });
  const logs: string[] = [];
  const host = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`docker-registry did not say where it listens within 30 s: ${logs.join("\n").slice(-1000)}`)), 30_000);
    const onLine = (chunk: Buffer): void => {
      const text = chunk.toString("utf8");
      logs.push(text);
      const m = /listening on (127\.0\.0\.1:\d+)/.exec(text);
      if (m) {
        clearTimeout(timer);
        resolve(m[1]!);
      }
    };
    child.stdout!.on("data", onLine);
    child.stderr!.on("data", onLine);
    child.once("exit", (code) => {
      clearTimeout(timer);
      reject(new Error(`docker-registry exited (${code}): ${logs.join("").slice(-1000)}`));
    });
  });
  return {
    host,
    logs,
    async stop() {
      if (child.exitCode === null && child.signalCode === null) {
        const exited = new Promise<void>((r) => child.once("exit", () => r()));
        child.kill("SIGTERM");
        await exited;
      }
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/**
 * Pushes an OCI layout (tag "latest") to `registry` as `name` (repo:tag), with the registry's
 * credentials when it wants them. They go in an auth file (0600), never on skopeo's command
 * line: tests assert the password is on no `ps` line while they run, and the other test file
 * running beside them may be pushing.
 */
export async function pushImage(layoutDir: string, registry: string, name: string, opts: { auth?: boolean } = {}): Promise<string> {
  const ref = `${registry}/${name}`;
  const dir = opts.auth ? mkdtempSync(join(tmpdir(), "slotpool-push-auth-")) : undefined;
  try {
    const authFile = dir ? join(dir, "auth.json") : undefined;
    if (authFile) {
      const auth = Buffer.from(`${REGISTRY_USER}:${REGISTRY_PASSWORD}`).toString("base64");
      writeFileSync(authFile, JSON.stringify({ auths: { [registry]: { auth } } }), { mode: 0o600 });
    }
    await run(
      "skopeo",
      ["--insecure-policy", "copy", "--quiet", "--dest-tls-verify=false", ...(authFile ? ["--dest-authfile", authFile] : []), `oci:${layoutDir}:latest`, `docker://${ref}`],
      { timeout: 300_000, maxBuffer: 1 << 20 },
    );
  } finally {
    if (dir) rmSync(dir, { recursive: true, force: true });
  }
  return ref;
}

/** Whether Debian's docker-registry and skopeo are installed (tests that need them skip, saying so). */
export async function registryTools(): Promise<string | undefined> {
  for (const tool of ["docker-registry", "skopeo"]) {
    try {
      await run("sh", ["-c", `command -v ${tool}`]);
    } catch {
      return `${tool} is not installed (scripts/setup.sh installs it)`;
    }
  }
  return undefined;
}
