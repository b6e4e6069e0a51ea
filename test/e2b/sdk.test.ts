// runs as each user: E2B's users (`user`, `root`) map onto one slot uid per slot as root and onto the server's own uid otherwise
import { randomBytes } from "node:crypto";
import { createServer, type AddressInfo } from "node:net";
import {
  AuthenticationError,
  CommandExitError,
  FileNotFoundError,
  InvalidArgumentError,
  Sandbox,
  SandboxError,
  SandboxNotFoundError,
  TimeoutError,
} from "e2b";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startE2b, type E2bHarness } from "./helpers.js";
import { ENVD_VERSION } from "../../src/e2b/index.js";

/**
 * The E2B-compatible API driven by the real `e2b` SDK (pinned in package.json), against a
 * local pool of real sandbox servers: what code written for E2B does, unchanged.
 */

async function until(cond: () => boolean | Promise<boolean>, timeoutMs = 10_000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!(await cond())) {
    if (Date.now() > end) throw new Error("condition not met in time");
    await new Promise((r) => setTimeout(r, 25));
  }
}

describe("E2B SDK against slotpool", () => {
  let h: E2bHarness;
  let sbx: Sandbox;
  beforeAll(async () => {
    h = await startE2b({ slots: 6, templates: [{ name: "repo", files: { "README.md": "template readme\n" }, setup: ["echo built > marker.txt"] }] });
    sbx = await Sandbox.create({ ...h.opts, metadata: { suite: "sdk", role: "main" } });
  }, 120_000);
  afterAll(async () => {
    await h?.stop();
  });

  it("commands.run returns stdout, stderr and the exit code; /home/user is the working directory", async () => {
    const r = await sbx.commands.run("echo out; echo err >&2; pwd; echo $HOME");
    expect(r).toMatchObject({ exitCode: 0, stdout: "out\n/home/user\n/home/user\n", stderr: "err\n" });
    const env = await sbx.commands.run("echo $GREETING", { envs: { GREETING: "hi there" }, cwd: "/tmp" });
    expect(env.stdout).toBe("hi there\n");
  });

  it("a non-zero exit raises CommandExitError with the result", async () => {
    const err = await sbx.commands.run("echo partial; echo bad >&2; exit 3").catch((e: unknown) => e);
    expect(err).toBeInstanceOf(CommandExitError);
    expect(err).toMatchObject({ exitCode: 3, stdout: "partial\n", stderr: "bad\n" });
  });

  it("a command outliving its timeoutMs gets TimeoutError and is killed; large output arrives whole; commands run concurrently", async () => {
    const err = await sbx.commands.run("echo begun; sleep 30", { timeoutMs: 1000 }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(TimeoutError);
    await until(async () => (await sbx.commands.list()).length === 0);
    const big = await sbx.commands.run("head -c 2000000 /dev/zero | tr '\\0' a");
    expect(big.stdout.length).toBe(2_000_000);
    expect(big.stdout.replace(/a/g, "")).toBe("");
    // Eight commands of one sandbox run at once: each ends only when all eight have started
    // (run one at a time, the first would wait forever: the event, not a 3.5 s bound).
    await sbx.commands.run("rm -rf barrier && mkdir barrier");
    const many = await Promise.all(
      Array.from({ length: 8 }, (_, i) => sbx.commands.run(`touch barrier/${i}; while [ "$(ls barrier | wc -l)" -lt 8 ]; do sleep 0.05; done; echo ${i}`, { timeoutMs: 60_000 })),
    );
    expect(many.map((r) => r.stdout)).toEqual(Array.from({ length: 8 }, (_, i) => `${i}\n`));
  });

  it("background commands stream their output, take stdin, can be listed and waited for", async () => {
    const seen: string[] = [];
    const h1 = await sbx.commands.run("for i in 1 2 3; do echo line$i; sleep 0.2; done", { background: true, onStdout: (d) => void seen.push(d) });
    // Streamed: the first line arrives before the command ends.
    await until(() => seen.join("").includes("line1"));
    expect(h1.exitCode).toBeUndefined();
    const listed = await sbx.commands.list();
    expect(listed.map((p) => p.pid)).toContain(h1.pid);
    const done = await h1.wait();
    expect(done.exitCode).toBe(0);
    expect(seen.join("")).toBe("line1\nline2\nline3\n");

    const reader = await sbx.commands.run("read a; read b; echo got:$a:$b", { background: true, stdin: true });
    await sbx.commands.sendStdin(reader.pid, "one\n");
    await sbx.commands.sendStdin(reader.pid, "two\n");
    expect((await reader.wait()).stdout).toBe("got:one:two\n");
  });

  it("kill() ends a running command; another client connects to a running one", async () => {
    const long = await sbx.commands.run("echo started; sleep 600", { background: true });
    const other = await Sandbox.connect(sbx.sandboxId, h.opts);
    const out: string[] = [];
    const attached = await other.commands.connect(long.pid, { onStdout: (d) => void out.push(d) });
    expect(await other.commands.kill(long.pid)).toBe(true);
    const err = await long.wait().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(CommandExitError);
    expect((err as CommandExitError).exitCode).toBe(-1);
    await attached.wait().catch(() => undefined);
    expect((await sbx.commands.list()).map((p) => p.pid)).not.toContain(long.pid);
    expect(await sbx.commands.kill(long.pid)).toBe(false);
  });

  it("pty.create runs an interactive shell on a terminal of the given size; input, output, exit", async () => {
    const out: string[] = [];
    const term = await sbx.pty.create({ cols: 100, rows: 30, onData: (d) => void out.push(Buffer.from(d).toString("utf8")) });
    const text = () => out.join("");
    await sbx.pty.sendInput(term.pid, new TextEncoder().encode("stty size; [ -t 0 ] && echo is-a-tty; echo pty-$((40+2))\n"));
    await until(() => text().includes("pty-42") && text().includes("is-a-tty") && text().includes("30 100"));
    await expect(sbx.pty.resize(term.pid, { cols: 80, rows: 24 })).rejects.toThrow(/resize is not supported/);
    await sbx.pty.sendInput(term.pid, new TextEncoder().encode("exit 0\n"));
    expect((await term.wait()).exitCode).toBe(0);
  });

  it("files: write, read, list, makeDir, rename, remove, exists, getInfo", async () => {
    await sbx.files.write("notes/a.txt", "hello");
    expect(await sbx.files.read("/home/user/notes/a.txt")).toBe("hello");
    expect((await sbx.commands.run("cat notes/a.txt")).stdout).toBe("hello");
    expect(await sbx.files.makeDir("notes/sub")).toBe(true);
    expect(await sbx.files.makeDir("notes/sub")).toBe(false);
    const entries = await sbx.files.list("notes");
    expect(entries.map((e) => [e.name, e.type, e.path]).sort()).toEqual([
      ["a.txt", "file", "/home/user/notes/a.txt"],
      ["sub", "dir", "/home/user/notes/sub"],
    ]);
    expect(entries.find((e) => e.name === "a.txt")?.size).toBe(5);
    await sbx.files.rename("notes/a.txt", "notes/sub/b.txt");
    expect(await sbx.files.exists("notes/a.txt")).toBe(false);
    expect((await sbx.files.getInfo("notes/sub/b.txt")).size).toBe(5);
    const many = await sbx.files.write([
      { path: "notes/m/1.txt", data: "one" },
      { path: "/home/user/notes/m/2.txt", data: "two" },
    ]);
    expect(many.map((w) => w.path)).toEqual(["/home/user/notes/m/1.txt", "/home/user/notes/m/2.txt"]);
    expect((await sbx.commands.run("cat notes/m/1.txt notes/m/2.txt")).stdout).toBe("onetwo");
    await sbx.files.remove("notes");
    expect(await sbx.files.exists("notes")).toBe(false);
    await expect(sbx.files.read("notes/sub/b.txt")).rejects.toBeInstanceOf(FileNotFoundError);
    await expect(sbx.files.list("missing-dir")).rejects.toBeInstanceOf(FileNotFoundError);
  });

  it("files.watchDir reports creates, writes and removes (recursive too); commands.list shows no watcher", async () => {
    await sbx.files.makeDir("watched/sub");
    const events: Array<{ name: string; type: string }> = [];
    const handle = await sbx.files.watchDir("watched", (e) => void events.push({ name: e.name, type: e.type }), { recursive: true });
    try {
      expect((await sbx.commands.list()).map((p) => p.cmd)).not.toContain("/bin/sh");
      await sbx.files.write("watched/a.txt", "one");
      await until(() => events.some((e) => e.name === "a.txt" && e.type === "create"));
      await sbx.commands.run("sleep 0.3; echo more >> watched/a.txt; echo x > watched/sub/deep.txt");
      await until(() => events.some((e) => e.name === "a.txt" && e.type === "write") && events.some((e) => e.name === "sub/deep.txt" && e.type === "create"));
      await sbx.files.remove("watched/a.txt");
      await until(() => events.some((e) => e.name === "a.txt" && e.type === "remove"));
    } finally {
      await handle.stop();
    }
    // The watch's polling process ends with the watch.
    const slotProcesses = () => h.server.registry.get(sbx.sandboxId)!.processes.list();
    await until(async () => !(await slotProcesses()).some((p) => p.tag === "slotpool:watch"));
    await expect(sbx.files.watchDir("no-such-dir", () => undefined)).rejects.toBeInstanceOf(FileNotFoundError);
  });

  it("uploads and downloads a binary file byte for byte", async () => {
    const data = randomBytes(3 * 1024 * 1024 + 17);
    await sbx.files.write("bin/blob.dat", data.buffer.slice(data.byteOffset, data.byteOffset + data.length) as ArrayBuffer);
    const back = await sbx.files.read("bin/blob.dat", { format: "bytes" });
    expect(Buffer.from(back).equals(data)).toBe(true);
    const sum = await sbx.commands.run("sha256sum bin/blob.dat | cut -d' ' -f1");
    expect(sum.stdout.trim()).toBe((await import("node:crypto")).createHash("sha256").update(data).digest("hex"));
    // The octet-stream path too.
    await sbx.files.write("bin/two.dat", new Blob([data.subarray(0, 1000)]), { useOctetStream: true });
    expect(Buffer.from(await sbx.files.read("bin/two.dat", { format: "bytes" })).equals(data.subarray(0, 1000))).toBe(true);
  });

  it("two sandboxes are isolated: files, processes and tokens", async () => {
    const b = await Sandbox.create({ ...h.opts, metadata: { suite: "sdk", role: "other" } });
    try {
      await sbx.files.write("secret.txt", "only in main");
      expect(await b.files.exists("secret.txt")).toBe(false);
      expect((await b.commands.run("ls -A /home/user | grep -v '^.slotpool' | wc -l")).stdout.trim()).toBe("0");
      const bg = await sbx.commands.run("sleep 30", { background: true });
      expect((await b.commands.list()).map((p) => p.pid)).not.toContain(bg.pid);
      expect(await b.commands.kill(bg.pid)).toBe(false);
      await bg.kill();
      // B's token on A's sandbox id: refused, as E2B refuses a wrong access token.
      const forged = new (Sandbox as unknown as new (o: object) => Sandbox)({ ...h.opts, sandboxId: sbx.sandboxId, envdVersion: "0.5.7", envdAccessToken: (b as unknown as { envdAccessToken: string }).envdAccessToken });
      await expect(forged.files.read("secret.txt")).rejects.toBeInstanceOf(AuthenticationError);
      await expect(forged.commands.run("cat secret.txt")).rejects.toBeInstanceOf(AuthenticationError);
    } finally {
      await b.kill();
    }
  });

  it("Sandbox.list filters by metadata and pages as the SDK expects", async () => {
    const extra = await Promise.all([1, 2].map((i) => Sandbox.create({ ...h.opts, metadata: { suite: "list", n: String(i) } })));
    try {
      const all = await Sandbox.list({ ...h.opts, query: { metadata: { suite: "list" } } }).nextItems();
      expect(all.map((s) => s.sandboxId).sort()).toEqual(extra.map((s) => s.sandboxId).sort());
      expect(all[0]).toMatchObject({ state: "running", templateId: "base", envdVersion: ENVD_VERSION });
      const one = await Sandbox.list({ ...h.opts, query: { metadata: { suite: "list", n: "2" } } }).nextItems();
      expect(one.map((s) => s.sandboxId)).toEqual([extra[1]!.sandboxId]);
      const pager = Sandbox.list({ ...h.opts, limit: 1, query: { metadata: { suite: "list" } } });
      const first = await pager.nextItems();
      expect(pager.hasNext).toBe(true);
      const second = await pager.nextItems();
      expect(first.length + second.length).toBe(2);
      expect(new Set([...first, ...second].map((s) => s.sandboxId)).size).toBe(2);
      expect(pager.hasNext).toBe(false);
      expect(await Sandbox.list({ ...h.opts, query: { state: ["paused"] } }).nextItems()).toEqual([]);
    } finally {
      await Promise.all(extra.map((s) => s.kill()));
    }
  });

  it("getInfo and setTimeout; a sandbox that reaches its timeout is gone and its slot is released", async () => {
    const info = await sbx.getInfo();
    expect(info).toMatchObject({ sandboxId: sbx.sandboxId, metadata: { suite: "sdk", role: "main" }, state: "running" });
    const short = await Sandbox.create({ ...h.opts, timeoutMs: 60_000 });
    const held = h.pool.stats().slots.held;
    await short.setTimeout(1_000);
    const end = (await short.getInfo()).endAt.getTime();
    // bound: endAt is the server's now + 1 s, read back after it: a slow round trip only makes this smaller; above 1.5 s means a later end was set.
    expect(end - Date.now()).toBeLessThan(1_500);
    await until(async () => !(await short.isRunning()), 30_000);
    // What the SDK says of a command sent to a sandbox that is gone (E2B's proxy answers the same way).
    await expect(short.commands.run("true")).rejects.toBeInstanceOf(SandboxNotFoundError);
    await expect(short.files.read("x")).rejects.toBeInstanceOf(TimeoutError);
    await expect(Sandbox.getInfo(short.sandboxId, h.opts)).rejects.toBeInstanceOf(SandboxNotFoundError);
    await until(() => h.pool.stats().slots.held === held - 1, 30_000);
  });

  it("Sandbox.fork with count 2: two new sandboxes holding the parent's workspace as it was, each on its own from then on", async () => {
    const parent = await Sandbox.create({ ...h.opts, metadata: { suite: "fork" }, envs: { FROM: "parent" } });
    try {
      await parent.files.write("state.txt", "before");
      await parent.commands.run("mkdir -p deep/dir && echo nested > deep/dir/f");
      const ticker = await parent.commands.run("while true; do echo tick >> ticks.txt; sleep 0.05; done", { background: true, timeoutMs: 0 });
      await until(async () => (await parent.files.exists("ticks.txt")));
      const forks = await parent.fork({ count: 2 });
      expect(forks).toHaveLength(2);
      const [a, b] = forks as Sandbox[];
      expect(a).toBeInstanceOf(Sandbox);
      expect(b).toBeInstanceOf(Sandbox);
      expect(new Set([parent.sandboxId, a!.sandboxId, b!.sandboxId]).size).toBe(3);
      for (const f of [a!, b!]) {
        expect(await f.files.read("state.txt")).toBe("before");
        expect((await f.commands.run("cat deep/dir/f; echo $FROM")).stdout).toBe("nested\nparent\n");
        expect((await f.getInfo()).metadata).toEqual({ suite: "fork" });
      }
      // The parent's running commands end at the fork (they hold the view the forks now share).
      await expect(ticker.wait()).rejects.toBeInstanceOf(CommandExitError);
      expect(await parent.commands.list()).toEqual([]);
      const ticks = await a!.files.read("ticks.txt");
      // wait: a window in which the ended ticker must write nothing more (a loaded box can only show less)
      await new Promise((r) => setTimeout(r, 300));
      expect(await a!.files.read("ticks.txt")).toBe(ticks);
      // From here on each goes its own way: no write reaches another.
      await a!.files.write("state.txt", "child a");
      await parent.files.write("state.txt", "parent after");
      await parent.files.write("new-in-parent.txt", "x");
      expect(await b!.files.read("state.txt")).toBe("before");
      expect(await a!.files.read("state.txt")).toBe("child a");
      expect(await parent.files.read("state.txt")).toBe("parent after");
      expect(await b!.files.exists("new-in-parent.txt")).toBe(false);
      // A fork's token opens the fork only.
      const forged = new (Sandbox as unknown as new (o: object) => Sandbox)({ ...h.opts, sandboxId: parent.sandboxId, envdVersion: "0.5.7", envdAccessToken: (a as unknown as { envdAccessToken: string }).envdAccessToken });
      await expect(forged.files.read("state.txt")).rejects.toBeInstanceOf(AuthenticationError);
      await Promise.all([a!.kill(), b!.kill()]);
      expect(await parent.isRunning()).toBe(true);
    } finally {
      await parent.kill();
    }
  });

  it("a sandbox from a workspace template starts with the template's files", async () => {
    const t = await Sandbox.create("repo", h.opts);
    try {
      expect(await t.files.read("marker.txt")).toBe("built\n");
      expect((await t.commands.run("cat README.md")).stdout).toBe("template readme\n");
      expect((await t.getInfo()).templateId).toBe("repo");
    } finally {
      await t.kill();
    }
  });

  it("kill ends the sandbox: its commands stop, it is not listed, a second kill says false", async () => {
    const k = await Sandbox.create(h.opts);
    const bg = await k.commands.run("sleep 600", { background: true });
    await k.kill();
    await expect(bg.wait()).rejects.toBeDefined();
    expect(await k.isRunning()).toBe(false);
    expect(await Sandbox.kill(k.sandboxId, h.opts)).toBe(false);
    expect((await Sandbox.list(h.opts).nextItems()).map((s) => s.sandboxId)).not.toContain(k.sandboxId);
  });

  it("answers what it does not support with a clear error and its stable code (errorCode, beside E2B's code: the status)", async () => {
    const logs = await fetch(`${h.url}/sandboxes/${sbx.sandboxId}/logs`, { headers: { "x-api-key": h.apiKey } });
    expect(logs.status).toBe(501);
    expect(await logs.json()).toMatchObject({ code: 501, errorCode: "E2B_UNSUPPORTED", message: expect.stringMatching(/sandbox logs is not supported by slotpool/) });
    await expect(sbx.commands.run("true", { background: false, timeoutMs: 5000, user: "root" }).then((r) => r.exitCode)).resolves.toBe(0);
  });

  describe("bad requests get E2B's error shapes", () => {
    it("an unknown sandbox", async () => {
      await expect(Sandbox.connect("sp000000000000000000", h.opts)).rejects.toBeInstanceOf(SandboxNotFoundError);
      await expect(Sandbox.getInfo("sp000000000000000000", h.opts)).rejects.toBeInstanceOf(SandboxNotFoundError);
      const res = await fetch(`${h.url}/sandboxes/nope`, { headers: { "x-api-key": h.apiKey } });
      expect(res.status).toBe(404);
      expect(await res.json()).toEqual({ code: 404, message: "sandbox 'nope' not found" });
    });

    it("a wrong or missing API key", async () => {
      await expect(Sandbox.create({ ...h.opts, apiKey: "e2b_wrong" })).rejects.toBeInstanceOf(AuthenticationError);
      await expect(Sandbox.list({ ...h.opts, apiKey: "e2b_wrong" }).nextItems()).rejects.toBeInstanceOf(AuthenticationError);
      const res = await fetch(`${h.url}/v2/sandboxes`);
      expect(res.status).toBe(401);
      expect(await res.json()).toMatchObject({ code: 401, message: expect.stringContaining("X-API-Key") });
    });

    it("other control-plane routes: /health open, v1 list, refreshes, 404 and 405 in E2B's shape; unknown in-sandbox routes", async () => {
      expect((await fetch(`${h.url}/health`)).status).toBe(200);
      const key = { "x-api-key": h.apiKey, "content-type": "application/json" };
      const v1 = (await (await fetch(`${h.url}/sandboxes`, { headers: key })).json()) as Array<{ sandboxID: string }>;
      expect(v1.map((x) => x.sandboxID)).toContain(sbx.sandboxId);
      expect((await fetch(`${h.url}/sandboxes/${sbx.sandboxId}/refreshes`, { method: "POST", headers: key, body: JSON.stringify({ duration: 600 }) })).status).toBe(204);
      const wrongMethod = await fetch(`${h.url}/sandboxes/${sbx.sandboxId}/timeout`, { headers: key });
      expect(wrongMethod.status).toBe(405);
      expect(await wrongMethod.json()).toMatchObject({ code: 405 });
      // (GET /templates is a route now: the templates built through E2B's template API.)
      const unknown = await fetch(`${h.url}/teams`, { headers: key });
      expect(unknown.status).toBe(404);
      expect(await unknown.json()).toMatchObject({ code: 404, message: expect.stringContaining("no route GET /teams") });
      const token = (sbx as unknown as { envdAccessToken: string }).envdAccessToken;
      const envd = await fetch(`${h.url}/envs`, { headers: { "e2b-sandbox-id": sbx.sandboxId, "x-access-token": token } });
      expect(envd.status).toBe(404);
      // Another port is the sandbox's own server's (test/e2b/ports.test.ts): nothing listens on 8080 here.
      const otherPort = await fetch(`${h.url}/health`, { headers: { "e2b-sandbox-id": sbx.sandboxId, "e2b-sandbox-port": "8080", "x-access-token": token } });
      expect(otherPort.status).toBe(502);
      expect(await otherPort.json()).toMatchObject({ code: 502, sandboxId: sbx.sandboxId, port: 8080, message: "The sandbox is running but port is not open" });
    });

    it("bad create bodies name the field", async () => {
      const res = await fetch(`${h.url}/v2/sandboxes`, { method: "POST", headers: { "x-api-key": h.apiKey, "content-type": "application/json" }, body: JSON.stringify({ templateID: "base", timeout: -1 }) });
      expect(res.status).toBe(400);
      expect(await res.json()).toMatchObject({ code: 400, message: expect.stringContaining("timeout") });
      await expect(Sandbox.create("no-such-template", h.opts)).rejects.toThrow(/template 'no-such-template' not found/);
      await expect(Sandbox.create({ ...h.opts, envs: { "BAD-NAME": "x" } })).rejects.toThrow(/envVars\.BAD-NAME: environment variable names are/);
      await expect(Sandbox.create({ ...h.opts, timeoutMs: 90 * 86_400_000 })).rejects.toBeInstanceOf(SandboxError);
      // Asking for internet on a server without it: loopback only, and the info says so.
      const asked = await Sandbox.create({ ...h.opts, allowInternetAccess: true });
      try {
        expect((await asked.getInfo()).allowInternetAccess).toBe(false);
        expect((await asked.commands.run("cat /proc/net/dev | tail -n +3 | cut -d: -f1 | tr -d ' '")).stdout).toBe("lo\n");
      } finally {
        await asked.kill();
      }
    });
  });
});

describe("E2B SDK against slotpool: limits, slot reuse, network", () => {
  let h: E2bHarness;
  beforeAll(async () => {
    h = await startE2b({ slots: 1, maxUploadBytes: 1024 * 1024, allowNetwork: true });
  }, 120_000);
  afterAll(async () => {
    await h?.stop();
  });

  it("an oversized upload is refused with 413 and writes nothing", async () => {
    const s = await Sandbox.create(h.opts);
    try {
      const err = await s.files.write("big.bin", new Uint8Array(2 * 1024 * 1024).buffer).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(SandboxError);
      expect(String((err as Error).message)).toMatch(/413.*larger than this server's limit/);
      expect(await s.files.exists("big.bin")).toBe(false);
    } finally {
      await s.kill();
    }
  });

  it("with --allow-network a sandbox's commands get the slot's own network (never the host's loopback); allowInternetAccess: false gets loopback only", async () => {
    const listener = createServer((c) => {
      c.on("error", () => undefined);
      c.end("pong\n");
    });
    await new Promise<void>((r) => listener.listen(0, "127.0.0.1", () => r()));
    const port = (listener.address() as AddressInfo).port;
    const probe = `(exec 3<>/dev/tcp/127.0.0.1/${port} && head -c 4 <&3) 2>/dev/null; cat /proc/net/dev | tail -n +3 | cut -d: -f1 | tr -d ' ' | sort | tr '\\n' ' '`;
    try {
      const internet = (await (await fetch(`${h.pool.containerList()[0]!.url}/health`)).json()) as { internet: string };
      const on = await Sandbox.create(h.opts);
      try {
        const out = (await on.commands.run(probe)).stdout;
        expect(out).not.toContain("pong");
        expect(out).toContain(internet.internet === "slirp4netns" ? "lo tap0" : "lo");
        expect((await on.getInfo()).allowInternetAccess).toBe(true);
      } finally {
        await on.kill();
      }
      const off = await Sandbox.create({ ...h.opts, allowInternetAccess: false });
      try {
        expect((await off.commands.run(probe)).stdout).toBe("lo ");
      } finally {
        await off.kill();
      }
    } finally {
      listener.close();
    }
  });

  it("the next sandbox on the same slot finds nothing of the previous one (files, processes)", async () => {
    const a = await Sandbox.create(h.opts);
    await a.files.write("left.txt", "previous trajectory");
    await a.commands.run("sleep 600", { background: true });
    await a.kill();
    const b = await Sandbox.create(h.opts);
    try {
      expect(await b.files.exists("left.txt")).toBe(false);
      expect(await b.commands.list()).toEqual([]);
      expect((await b.commands.run("ls -A /home/user | grep -v '^.slotpool' | wc -l")).stdout.trim()).toBe("0");
    } finally {
      await b.kill();
    }
  });
});
