import { execFile, spawn, spawnSync, type ChildProcess } from "node:child_process";
import { chmod, mkdir, mkdtemp, readdir, rm, stat, symlink } from "node:fs/promises";
import { cpSync, existsSync, readFileSync, readdirSync, readlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import { delimiter, join, resolve } from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { slotpoolCommand } from "../../src/pool/slotpool-command.js";
import { descendants } from "../support/processes.js";
import { serversMayMount } from "../support/server-view.js";

/**
 * The image without a Docker engine, through what it does (test/engines/docker-image.test.ts
 * builds and runs the real image where an engine answers): the Dockerfile is parsed, its ENTRYPOINT is run as written (through a `slotpool` symlink
 * on PATH, as the image installs it) with only the port and listen address swapped for
 * test-safe values, its HEALTHCHECK command is run against that server, and every apt
 * package it installs is checked to exist in Debian bookworm.
 */

const repo = resolve(import.meta.dirname, "..", "..");
const dockerfile = join(repo, "sandbox-image", "Dockerfile");
const run = promisify(execFile);

interface Instruction {
  keyword: string;
  args: string;
}

/** Instructions of a Dockerfile: comments dropped, backslash continuations joined. */
function parseDockerfile(text: string): Instruction[] {
  const out: Instruction[] = [];
  let pending = "";
  for (const raw of text.split("\n")) {
    const line = raw.trim();
    if (pending === "" && (line === "" || line.startsWith("#"))) continue;
    if (line.startsWith("#")) continue; // comment inside a continued instruction
    if (line.endsWith("\\")) {
      pending += line.slice(0, -1) + " ";
      continue;
    }
    const full = (pending + line).trim();
    pending = "";
    const m = /^(\S+)\s+([\s\S]*)$/.exec(full);
    if (m) out.push({ keyword: m[1]!.toUpperCase(), args: m[2]!.trim() });
  }
  return out;
}

/** Exec-form (JSON array) arguments; shell form is refused so signals reach the server. */
function execForm(args: string): string[] {
  expect(args.startsWith("["), `expected exec form (JSON array), got: ${args}`).toBe(true);
  const parsed: unknown = JSON.parse(args);
  expect(Array.isArray(parsed) && parsed.every((a) => typeof a === "string")).toBe(true);
  return parsed as string[];
}

/** The instructions of the final stage (the image that ships). */
function finalStage(all: Instruction[]): Instruction[] {
  let start = 0;
  all.forEach((ins, i) => {
    if (ins.keyword === "FROM") start = i;
  });
  return all.slice(start);
}

const instructions = parseDockerfile(readFileSync(dockerfile, "utf8"));
const last = finalStage(instructions);
const entrypoint = execForm(last.filter((i) => i.keyword === "ENTRYPOINT").at(-1)?.args ?? "[]");
const cmdIns = last.filter((i) => i.keyword === "CMD").at(-1);
const cmd = cmdIns ? execForm(cmdIns.args) : [];
const healthcheck = last.filter((i) => i.keyword === "HEALTHCHECK").at(-1);

/** Packages named by `apt-get install` in any RUN (options and shell operators dropped). */
function aptPackages(): string[] {
  const names: string[] = [];
  for (const ins of instructions.filter((i) => i.keyword === "RUN")) {
    for (const part of ins.args.split(/&&|;|\|\|/)) {
      const words = part.trim().split(/\s+/).filter((w) => !/^[A-Z_]+=/.test(w));
      const at = words.findIndex((w, i) => w === "install" && /apt(-get)?$/.test(words[i - 1] ?? ""));
      if (at < 0) continue;
      names.push(...words.slice(at + 1).filter((w) => !w.startsWith("-")));
    }
  }
  return names;
}

describe("sandbox-image/Dockerfile", () => {
  it("builds on Node 20 bookworm and ships the built server", () => {
    const froms = instructions.filter((i) => i.keyword === "FROM").map((i) => i.args.split(/\s+/)[0]!);
    expect(froms.length).toBeGreaterThan(0);
    for (const image of froms) expect(image).toMatch(/^node:20-bookworm(-slim)?$/);
    const runs = instructions.filter((i) => i.keyword === "RUN").map((i) => i.args).join("\n");
    expect(runs).toMatch(/npm ci\b/);
    expect(runs).toMatch(/npm run build\b/);
    expect(runs).toMatch(/npm prune --omit=dev\b/);
    expect(last.some((i) => i.keyword === "COPY" && i.args.includes("dist/src"))).toBe(true);
  });

  it("copies only files that exist and that .dockerignore lets through", () => {
    const ignored = readFileSync(join(repo, ".dockerignore"), "utf8")
      .split("\n").map((l) => l.trim()).filter((l) => l && !l.startsWith("#"));
    const sources = instructions
      .filter((i) => i.keyword === "COPY" && !i.args.startsWith("--from"))
      .flatMap((i) => i.args.split(/\s+/).slice(0, -1));
    expect(sources).toEqual(expect.arrayContaining(["package.json", "package-lock.json", "src"]));
    for (const src of sources) {
      expect(existsSync(join(repo, src)), `${src} is copied but missing from the repo`).toBe(true);
      expect(ignored.some((pattern) => src === pattern || src.startsWith(pattern + "/")), `${src} is excluded by .dockerignore`).toBe(false);
    }
    for (const needed of ["node_modules", "dist", ".git"]) expect(ignored).toContain(needed);
  });

  it("has the contract entrypoint and a curl HEALTHCHECK on /health", () => {
    // tini as PID 1: it reaps the orphans slot commands leave (Node as PID 1 does not).
    expect(entrypoint).toEqual(["tini", "-s", "--", "slotpool", "sandbox-server", "--host", "0.0.0.0", "--port", "8080"]);
    expect(aptPackages()).toContain("tini");
    expect(healthcheck, "HEALTHCHECK missing").toBeDefined();
    expect(healthcheck!.args).toMatch(/\bCMD\s+\[/);
    const probe = execForm(healthcheck!.args.slice(healthcheck!.args.indexOf("[")));
    expect(probe[0]).toBe("curl");
    expect(probe).toContain("-fsS");
    expect(probe.at(-1)).toBe("http://127.0.0.1:8080/health");
  });

  it("installs the packages a slot needs", () => {
    expect(aptPackages()).toEqual(expect.arrayContaining(["bubblewrap", "tmux", "git", "curl", "coreutils", "ca-certificates"]));
    // `python` as well as `python3`: E2B code and E2B's own tests run `python -m http.server`.
    expect(aptPackages()).toEqual(expect.arrayContaining(["python3", "python-is-python3"]));
  });

  // Source: Debian bookworm's package index through apt-cache (only when this machine is
  // bookworm and has fetched the index: `apt-get update`, which setup.sh runs when it
  // installs). Nothing outside the repository and the system's own apt state is read.
  const osRelease = existsSync("/etc/os-release") ? readFileSync("/etc/os-release", "utf8") : "";
  const listsDir = "/var/lib/apt/lists";
  const indexed =
    osRelease.includes("VERSION_CODENAME=bookworm") &&
    existsSync(listsDir) &&
    readdirSync(listsDir).some((f) => f.includes("bookworm") && f.includes("_Packages")) &&
    spawnSync("apt-cache", ["--version"], { stdio: "ignore" }).status === 0;
  it.skipIf(!indexed)("installs only packages that exist in Debian bookworm (needs a bookworm apt package index: skipped without one)", async () => {
    const packages = aptPackages();
    // One apt-cache call for all (it prints what it knows and fails on any unknown name).
    const shown = await run("apt-cache", ["show", "--no-all-versions", ...packages], { maxBuffer: 16 * 1024 * 1024 })
      .then((r) => r.stdout, (err: { stdout?: string }) => err.stdout ?? "");
    for (const pkg of packages) {
      const known = new RegExp(`^Package: ${pkg.replace(/[.+]/g, "\\$&")}$`, "m").test(shown);
      expect(known, `apt package ${pkg} not found in Debian bookworm`).toBe(true);
    }
  });
});

describe("the image's spawner (the server's fast path)", () => {
  const buildStage = instructions.slice(0, instructions.lastIndexOf(instructions.filter((i) => i.keyword === "FROM").at(-1)!));
  const buildRuns = buildStage.filter((i) => i.keyword === "RUN").map((i) => i.args);
  // Where the built server looks for a prebuilt spawner: dist/src/sandbox/native/, next to native-build.js.
  const spawnerTs = readFileSync(join(repo, "src", "sandbox", "isolation", "spawner-binary.ts"), "utf8");
  const nativeBuildTs = readFileSync(join(repo, "src", "sandbox", "native", "native-build.ts"), "utf8");
  const prebuilt = "dist/src/sandbox/native/slotpool-spawner";
  const buildCommands = buildRuns.join(" && ").split(/&&|;/).map((c) => c.trim());
  const compile = buildCommands.find((c) => /^(cc|gcc)\s/.test(c));
  // What the build stage runs after the TypeScript build, up to the prune: mkdir and cc only.
  const afterBuild = buildCommands.slice(buildCommands.indexOf("npm run build") + 1).filter((c) => /^(mkdir|cc|gcc)\s/.test(c));

  it("is compiled in the build stage, after the TypeScript, at the path the server looks for, and shipped", () => {
    // The server looks for slotpool-spawner in native-build's folder (dist/src/sandbox/native).
    expect(spawnerTs).toContain('prebuiltNative("slotpool-spawner")');
    expect(nativeBuildTs).toContain("const HERE = dirname(fileURLToPath(import.meta.url));");
    expect(nativeBuildTs).toContain("return join(HERE, name);");
    const installs = buildRuns.join("\n");
    expect(installs).toMatch(/apt-get install[^&;]*\bgcc\b/);
    expect(installs).toMatch(/apt-get install[^&;]*\blibc6-dev\b/);
    expect(compile, "no cc command in the build stage").toBeDefined();
    const words = compile!.split(/\s+/);
    expect(words[words.indexOf("-o") + 1]).toBe(prebuilt);
    expect(words.at(-1)).toBe("src/sandbox/native/spawner.c");
    const all = buildRuns.join(" && ");
    expect(all.indexOf("npm run build")).toBeGreaterThanOrEqual(0);
    expect(all.indexOf(compile!)).toBeGreaterThan(all.indexOf("npm run build"));
    // Built in /opt/slotpool, shipped with dist/src (the runtime stage has no compiler).
    expect(buildStage.filter((i) => i.keyword === "WORKDIR").at(-1)?.args).toBe("/opt/slotpool");
    expect(last.some((i) => i.keyword === "COPY" && /--from=build\s+\/opt\/slotpool\/dist\/src\s+\.\/dist\/src/.test(i.args))).toBe(true);
    expect(last.filter((i) => i.keyword === "RUN").map((i) => i.args).join(" ")).not.toMatch(/\b(gcc|libc6-dev)\b/);
  });

  it("builds every native helper the server looks for prebuilt (the runtime stage cannot compile one)", () => {
    const sandboxDir = join(repo, "src", "sandbox");
    const wanted = new Set(
      readdirSync(sandboxDir, { recursive: true, encoding: "utf8" })
        .filter((f) => f.endsWith(".ts"))
        .flatMap((f) => [...readFileSync(join(sandboxDir, f), "utf8").matchAll(/prebuiltNative\("([^"]+)"\)/g)].map((m) => m[1]!)),
    );
    expect([...wanted].sort()).toEqual(["slotpool-browser-launch", "slotpool-fork-mount", "slotpool-image-mount", "slotpool-port-relay", "slotpool-seccomp-filter", "slotpool-spawner", "slotpool-spawner-static", "slotpool-template-mount", "slotpool-volume-mount"]);
    const built = afterBuild.filter((c) => /^(cc|gcc)\s/.test(c)).map((c) => {
      const words = c.split(/\s+/);
      return words[words.indexOf("-o") + 1]!.replace("dist/src/sandbox/native/", "");
    });
    expect(built.sort()).toEqual([...wanted].sort());
  });

  const cc = (process.env["PATH"] ?? "").split(delimiter).some((d) => existsSync(join(d, "cc")));
  it.skipIf(!cc)("the shipped layout (dist/src only, no C source, no compiler needed) runs on that binary (needs cc on PATH for the build stage's commands; skipped without)", async () => {
    expect(compile, "no cc command in the build stage").toBeDefined();
    const root = await mkdtemp(join(tmpdir(), "slotpool-image-"));
    await chmod(root, 0o755); // a root server's slot uids must reach the data dir below it
    await chmod(root, 0o755);
    let server: ChildProcess | undefined;
    try {
      // Build stage: /opt/slotpool with src/ and the built dist/ as a clean clone's tsc leaves
      // it: no binary in dist/src/sandbox/native/ (tsc puts only native-build.js there;
      // spawners compiled by tests live there). The Dockerfile's own commands after
      // `npm run build` must build them.
      const build = join(root, "build");
      cpSync(join(repo, "src", "sandbox", "native"), join(build, "src", "sandbox", "native"), { recursive: true });
      cpSync(join(repo, "dist", "src"), join(build, "dist", "src"), { recursive: true, filter: (p) => !/[/\\]dist[/\\]src[/\\]sandbox[/\\]native[/\\]slotpool-/.test(p) });
      expect(readdirSync(join(build, "dist", "src", "sandbox", "native")).filter((n) => n.startsWith("slotpool-"))).toEqual([]);
      for (const command of afterBuild) {
        const [file, ...args] = command.split(/\s+/);
        await run(file!, args, { cwd: build });
      }
      // Runtime stage: only package.json, node_modules and dist/src.
      const rt = join(root, "rt");
      cpSync(join(build, "dist", "src"), join(rt, "dist", "src"), { recursive: true });
      cpSync(join(repo, "package.json"), join(rt, "package.json"));
      await symlink(join(repo, "node_modules"), join(rt, "node_modules"));
      const dataDir = join(root, "data");
      server = spawn(process.execPath, [join(rt, "dist", "src", "cli", "main.js"), "sandbox-server", "--port", "0", "--slots", "1", "--data-dir", dataDir], {
        env: { PATH: "/usr/bin:/bin", SLOTPOOL_LOG_LEVEL: "info" },
        stdio: ["ignore", "ignore", "pipe"],
      });
      const url = await new Promise<string>((res, rej) => {
        let buf = "";
        const timer = setTimeout(() => rej(new Error(`no listening line: ${buf.slice(-500)}`)), 30_000);
        server!.stderr!.on("data", (c: Buffer) => {
          buf += c.toString();
          const m = /"msg":"listening"[^\n]*?"url":"([^"]+)"|"url":"([^"]+)"[^\n]*"msg":"listening"/.exec(buf);
          if (m) {
            clearTimeout(timer);
            res((m[1] ?? m[2])!);
          }
        });
        server!.once("exit", (code) => rej(new Error(`server exited (${code}): ${buf.slice(-500)}`)));
      });
      const health = (await (await fetch(`${url}/health`)).json()) as { bwrap_available: boolean; fast_path: boolean };
      const out = (await (await fetch(`${url}/execute`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ slot_id: "slot_0", tool: "bash", args: { command: "echo from-image" } }) })).json()) as { output: string };
      expect(out.output).toBe("from-image");
      if (health.bwrap_available) expect(health.fast_path, "the shipped server did not find its prebuilt spawner").toBe(true);
      // It used the prebuilt binary: nothing compiled at start.
      const compiled = [join(rt, "dist", "src", "sandbox", "native"), join(dataDir, ".slotpool")].flatMap((d) => (existsSync(d) ? readdirSync(d) : [])).filter((n) => /^slotpool-spawner(-static)?-[0-9a-f]{12}$/.test(n));
      expect(compiled).toEqual([]);
    } finally {
      if (server && server.exitCode === null) {
        const exited = new Promise((r) => server!.once("exit", r));
        server.kill("SIGTERM");
        await exited;
      }
      await rm(root, { recursive: true, force: true });
    }
  }, 60_000);
});

describe("the image's entrypoint, run as written", () => {
  let dir: string;
  let child: ChildProcess | undefined;
  let url = "";
  let exited: Promise<number | null>;
  const logs: string[] = [];

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), "slotpool-image-"));
    await chmod(dir, 0o755); // a root server's slot uids must reach the data dir below it
    // Install `slotpool` the way the image does: the built main.js, executable, symlinked on PATH.
    const { args } = slotpoolCommand();
    const main = args[0]!;
    await chmod(main, 0o755);
    const bin = join(dir, "bin");
    await mkdir(bin);
    await symlink(main, join(bin, "slotpool"));
    const alloc = join(dir, "alloc");
    await mkdir(alloc);

    // Exactly the ENTRYPOINT + CMD, plus the slots Nomad's task args would add; only the
    // port (8080 → 0, a free one) and the address (0.0.0.0 → loopback) are swapped.
    const argv = [...entrypoint, ...cmd, "--slots", "2"].map((a, i, all) =>
      all[i - 1] === "--port" ? "0" : all[i - 1] === "--host" ? "127.0.0.1" : a,
    );
    const env: NodeJS.ProcessEnv = { ...process.env, PATH: `${bin}${delimiter}${process.env["PATH"] ?? ""}`, NOMAD_ALLOC_DIR: alloc };
    delete env["SANDBOX_TOKEN"];
    child = spawn(argv[0]!, argv.slice(1), { cwd: dir, env, stdio: ["ignore", "ignore", "pipe"] });
    exited = new Promise((res) => child!.once("exit", (code) => res(code)));
    url = await new Promise<string>((res, rej) => {
      const timer = setTimeout(() => rej(new Error(`no listening line within 20 s:\n${logs.join("\n")}`)), 20_000);
      let buf = "";
      child!.stderr!.setEncoding("utf8");
      child!.stderr!.on("data", (chunk: string) => {
        buf += chunk;
        let nl: number;
        while ((nl = buf.indexOf("\n")) >= 0) {
          const line = buf.slice(0, nl);
          buf = buf.slice(nl + 1);
          logs.push(line);
          try {
            const parsed = JSON.parse(line) as { msg?: string; url?: string };
            if (parsed.msg === "listening" && parsed.url) {
              clearTimeout(timer);
              res(parsed.url);
            }
          } catch {
            // not JSON
          }
        }
      });
      void exited.then((code) => rej(new Error(`entrypoint exited with ${code} before listening:\n${logs.join("\n")}`)));
    });
  });

  afterAll(async () => {
    if (child && child.exitCode === null && child.signalCode === null) {
      child.kill("SIGKILL");
      await exited;
    }
    await rm(dir, { recursive: true, force: true });
  });

  it("answers the image's HEALTHCHECK command", async () => {
    const port = new URL(url).port;
    const probe = execForm(healthcheck!.args.slice(healthcheck!.args.indexOf("["))).map((a) => a.replace(":8080/", `:${port}/`));
    const hasCurl = (process.env["PATH"] ?? "").split(delimiter).some((d) => existsSync(join(d, probe[0]!)));
    let body: string;
    if (hasCurl) {
      const r = await run(probe[0]!, probe.slice(1), { timeout: 10_000 });
      body = r.stdout;
    } else {
      // No curl on this machine: the same request, with curl -f's rule (HTTP >= 400 fails).
      const res = await fetch(probe.at(-1)!);
      expect(res.status).toBeLessThan(400);
      body = await res.text();
    }
    const health = JSON.parse(body) as { status: string; slots: number; bwrap_available: boolean };
    expect(health.status).toBe("ok");
    expect(health.slots).toBe(2);
    expect(typeof health.bwrap_available).toBe("boolean");
  });

  it("keeps slot workspaces under $NOMAD_ALLOC_DIR/data", async () => {
    const data = join(dir, "alloc", "data");
    expect((await stat(data)).isDirectory()).toBe(true);
    expect((await readdir(data)).sort()).toEqual(expect.arrayContaining(["slot_0", "slot_1"]));
    // Nothing landed in the working directory's ./data default.
    expect(existsSync(join(dir, "data"))).toBe(false);
  });

  it.skipIf(serversMayMount)("where servers may not mount: bounds /tmp only, mounts nothing on the host (skipped where servers may mount)", async () => {
    expect(readFileSync("/proc/self/mountinfo", "utf8")).not.toContain(join(dir, "alloc", "data"));
    const health = (await (await fetch(`${url}/health`)).json()) as { limits: { disk: string } };
    expect(health.limits.disk).toBe("tmp_only");
  });

  it.skipIf(!serversMayMount)("serves from namespaces of its own (root: a mount namespace; not root: a user namespace holding one): its slot disks are not mounted on the host (skipped where servers may not mount)", async () => {
    const data = join(dir, "alloc", "data");
    const hostMounts = readFileSync("/proc/self/mountinfo", "utf8");
    expect(hostMounts).not.toContain(data);
    const health = (await (await fetch(`${url}/health`)).json()) as { limits: { disk: string } };
    // The entrypoint's process re-executed itself under `unshare`: the server is its
    // descendant, in another mount namespace, where the slot disks are mounted.
    // (Below tini and the entrypoint's own node: the one that carries the re-exec's marker.)
    const server = descendants(child!.pid!).find(
      (pid) => readFileSync(`/proc/${pid}/cmdline`, "utf8").includes("sandbox-server") && readFileSync(`/proc/${pid}/environ`, "utf8").split("\0").includes("SLOTPOOL_OWN_MOUNT_NS=1"),
    );
    expect(server, "no sandbox-server below the entrypoint's process").toBeDefined();
    expect(readlinkSync(`/proc/${server}/ns/mnt`)).not.toBe(readlinkSync("/proc/self/ns/mnt"));
    expect(readFileSync(`/proc/${server}/mountinfo`, "utf8")).toContain(join(data, "slot_0"));
    expect(health.limits.disk).toBe("workspace_and_tmp");
  });

  it("stops on SIGTERM, as Nomad and docker stop it", async () => {
    child!.kill("SIGTERM");
    const code = await Promise.race([exited, new Promise((res) => setTimeout(() => res("still running"), 10_000))]);
    expect(code).toBe(0);
  });
});
