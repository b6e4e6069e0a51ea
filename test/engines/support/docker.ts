import { execFile, spawnSync } from "node:child_process";
import { createServer } from "node:net";
import { resolve } from "node:path";
import { promisify } from "node:util";

/**
 * A real Docker engine for the engine tests: whether one answers here, the sandbox image
 * (built by scripts/build-sandbox-image.sh when absent), and containers this test run starts
 * and removes (only its own: other users of the engine keep theirs).
 */

const run = promisify(execFile);
export const repo = resolve(import.meta.dirname, "..", "..", "..");

/** The container's seccomp profile shipped with the image (sandbox-image/seccomp-profile.md). */
export const SECCOMP_PROFILE = resolve(repo, "sandbox-image", "seccomp.json");

/**
 * The options a sandbox container needs (sandbox-image/Dockerfile's header, the README's
 * set-up table, docs/security-model.md and the Nomad job say the same): CAP_SYS_ADMIN for
 * the server's own mount namespace, its slot disks, cgroups and bubblewrap's namespaces;
 * the shipped seccomp profile (Docker's default plus pivot_root, which bubblewrap needs and
 * Docker's default refuses even with CAP_SYS_ADMIN), never seccomp=unconfined; AppArmor
 * unconfined where AppArmor is on (docker-default refuses mount); /dev/net/tun for
 * slirp4netns (network on).
 */
export const SANDBOX_CONTAINER_OPTIONS = ["--cap-add", "SYS_ADMIN", "--security-opt", `seccomp=${SECCOMP_PROFILE}`, "--security-opt", "apparmor=unconfined", "--device", "/dev/net/tun"];

/** Why the Docker engine tests cannot run here, or undefined when they can. */
export function dockerSkipReason(): string | undefined {
  if (process.getuid?.() !== 0) return "runs only as root (starts containers with CAP_SYS_ADMIN through the root-only Docker socket)";
  const info = spawnSync("docker", ["info", "--format", "{{.ServerVersion}}"], { encoding: "utf8", timeout: 20_000 });
  if (info.error) return `no docker CLI (${info.error.message}); install docker.io`;
  if (info.status !== 0) return `no Docker engine answers 'docker info' (${(info.stderr || "").trim().split("\n")[0]}); start one: .ci/docker-engine.sh`;
  return undefined;
}

export async function docker(args: string[], timeoutMs = 120_000): Promise<string> {
  const r = await run("docker", args, { encoding: "utf8", timeout: timeoutMs, maxBuffer: 64 * 1024 * 1024 });
  return r.stdout;
}

/** The image under test: $SLOTPOOL_TEST_IMAGE (CI builds it first), built here when absent. */
export async function sandboxImage(): Promise<string> {
  const tag = process.env["SLOTPOOL_TEST_IMAGE"] ?? "slotpool-sandbox:test";
  const present = spawnSync("docker", ["image", "inspect", tag], { stdio: "ignore" }).status === 0;
  if (!present || process.env["SLOTPOOL_TEST_IMAGE"] === undefined) {
    // Rebuilt from this checkout unless CI named a prebuilt one (layers are cached: seconds).
    await run(resolve(repo, "scripts", "build-sandbox-image.sh"), [tag], { encoding: "utf8", timeout: 900_000, maxBuffer: 64 * 1024 * 1024 });
  }
  return tag;
}

export async function freePort(): Promise<number> {
  return new Promise((res, rej) => {
    const s = createServer();
    s.once("error", rej);
    s.listen(0, "127.0.0.1", () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => res(port));
    });
  });
}

const started: string[] = [];
let counter = 0;

/** `docker run -d` of a container named for this test run; returns its name. */
export async function startContainer(args: string[]): Promise<string> {
  const name = `slotpool-test-${process.pid}-${++counter}`;
  started.push(name);
  await docker(["run", "-d", "--name", name, ...args]);
  return name;
}

/** Removes every container this process started. */
export async function removeContainers(): Promise<void> {
  const names = started.splice(0);
  if (names.length > 0) await docker(["rm", "-f", ...names]).catch(() => undefined);
}

export async function logs(name: string): Promise<string> {
  const r = await run("docker", ["logs", name], { encoding: "utf8", maxBuffer: 16 * 1024 * 1024 });
  return r.stdout + r.stderr;
}

/** Waits until `url`/health answers (or the container exits: its logs in the error). */
export async function waitHealthy(name: string, url: string, timeoutMs = 60_000): Promise<Record<string, unknown>> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      const r = await fetch(`${url}/health`, { signal: AbortSignal.timeout(2_000) });
      if (r.ok) return (await r.json()) as Record<string, unknown>;
    } catch {
      /* not listening yet */
    }
    const state = (await docker(["inspect", "-f", "{{.State.Status}}", name])).trim();
    if (state === "exited" || Date.now() > deadline) throw new Error(`container ${name} ${state === "exited" ? "exited" : "not healthy in time"}:\n${(await logs(name)).slice(-3000)}`);
    await new Promise((r) => setTimeout(r, 250));
  }
}

/** Waits for a container to exit; returns its exit code. */
export async function waitExit(name: string, timeoutMs = 60_000): Promise<number> {
  const out = await docker(["wait", name], timeoutMs);
  return Number(out.trim());
}
