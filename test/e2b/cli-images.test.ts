import { execFileSync, spawnSync } from "node:child_process";
import { Sandbox, SandboxError } from "e2b";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { slotpoolCommand } from "../../src/pool/slotpool-command.js";
import { imagesMissing } from "../support/image-server.js";
import { pushImage, REGISTRY_PASSWORD, REGISTRY_USER, startRegistry, type TestRegistry } from "../support/registry.js";
import { busyboxImage } from "../support/test-images.js";
import { startServerCli } from "../support/server-cli.js";

/**
 * `--insecure-registry HOST:PORT` (repeatable) on the servers that start sandbox servers
 * (issue 36), as a user runs them: a bad value is a usage error naming it on executor-server,
 * e2b-server and openenv-server; through `slotpool e2b-server` the flag reaches the sandbox
 * servers its pool starts (an image from that plain-HTTP registry is a sandbox, one from a
 * registry not named is refused naming the flag), and the environment's registry credentials
 * reach them too without showing on any command line or in the server's output.
 */
function startE2bCli(extra: string[], env: NodeJS.ProcessEnv) {
  return startServerCli("e2b-server", ["--port", "0", ...extra], env);
}

describe("--insecure-registry on the servers that start sandbox servers", () => {
  it("a value that is no registry HOST[:PORT] is a usage error (exit 2) naming it, on executor-server, e2b-server and openenv-server", () => {
    const { command, args } = slotpoolCommand();
    const cases: [string, string[]][] = [
      ["executor-server", []],
      ["e2b-server", []],
      ["openenv-server", ["examples/shell-tasks/env.js"]],
    ];
    for (const [server, extra] of cases) {
      const r = spawnSync(command, [...args, server, ...extra, "--port", "0", "--insecure-registry", "127.0.0.1:5000", "--insecure-registry", "not a host"], {
        encoding: "utf8",
        timeout: 60_000,
        env: { ...process.env, E2B_API_KEY: "cli-key" },
      });
      expect(r.status, `${server}: ${r.stderr}`).toBe(2);
      expect(r.stderr).toContain("--insecure-registry");
      expect(r.stderr).toContain("not a host");
      const help = spawnSync(command, [...args, server, "--help"], { encoding: "utf8", timeout: 60_000 });
      expect(help.stdout).toContain("--insecure-registry H:P");
      expect(help.stdout).toContain("SLOTPOOL_REGISTRY_AUTH");
    }
  }, 180_000);
});

describe.skipIf(imagesMissing !== undefined)(`slotpool e2b-server with task images from registries${imagesMissing ? ` (skipped without ${imagesMissing})` : ""}`, () => {
  let plain: TestRegistry;
  let other: TestRegistry;
  const refs: Record<string, string> = {};

  beforeAll(async () => {
    plain = await startRegistry({ auth: true });
    other = await startRegistry();
    refs.named = await pushImage(busyboxImage(), plain.host, "cli/busybox:1", { auth: true });
    refs.unnamed = await pushImage(busyboxImage(), other.host, "cli/busybox:1");
  }, 300_000);
  afterAll(async () => {
    await plain?.stop();
    await other?.stop();
  });

  it("the flag and the environment's credentials reach the pool's sandbox servers: the named registry's image is a sandbox, another plain-HTTP registry is refused naming the flag; the secret is on no command line", async () => {
    const b64 = Buffer.from(`${REGISTRY_USER}:${REGISTRY_PASSWORD}`).toString("base64");
    const doc = JSON.stringify({ auths: { [plain.host]: { auth: b64 } } });
    const srv = startE2bCli(["--provisioner", "local", "--slots-per-container", "2", "--min-containers", "1", "--max-containers", "1", "--insecure-registry", plain.host], {
      E2B_API_KEY: "cli-key",
      SLOTPOOL_REGISTRY_AUTH: doc,
    });
    try {
      const url = await srv.url;
      const opts = { apiUrl: url, sandboxUrl: url, apiKey: "cli-key" };
      const sbx = await Sandbox.create(refs.named!, opts);
      try {
        const r = await sbx.commands.run("pwd; echo $GREETING; cat /data/a.txt");
        expect(r).toMatchObject({ exitCode: 0, stdout: "/srv/work\nhello from the image\nlinked\n" });
      } finally {
        await sbx.kill();
      }
      const err = await Sandbox.create(refs.unnamed!, opts).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(SandboxError);
      expect((err as Error).message).toMatch(/^502: /);
      expect((err as Error).message).toContain(refs.unnamed!);
      expect((err as Error).message).toContain(`--insecure-registry ${other.host}`);
      // The sandbox servers this CLI started: the flag on their command line, the secret on none.
      const ps = execFileSync("ps", ["-eo", "args"], { encoding: "utf8" });
      expect(ps.split("\n").some((l) => l.includes("sandbox-server") && l.includes(`--insecure-registry ${plain.host}`))).toBe(true);
      for (const text of [ps, srv.state.logs, plain.logs.join("")]) {
        expect(text).not.toContain(REGISTRY_PASSWORD);
        expect(text).not.toContain(b64);
      }
      srv.child.kill("SIGTERM");
      expect(await srv.exited).toBe(0);
    } finally {
      if (srv.child.exitCode === null) srv.child.kill("SIGKILL");
    }
  }, 240_000);
});
