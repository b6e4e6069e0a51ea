// runs as each user: what a slot may not do (no root, sudo as the same user) is enforced by a slot uid as root and by the server's user namespace otherwise
import { FileType, Sandbox, SandboxError } from "e2b";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startE2b, type E2bHarness } from "./helpers.js";

/** The E2B conventions code written for E2B relies on: names, orderings, status codes. */
describe("E2B conventions", () => {
  let h: E2bHarness;
  let sbx: Sandbox;
  beforeAll(async () => {
    h = await startE2b({ slots: 4 });
    sbx = await Sandbox.create(h.opts);
  }, 120_000);
  afterAll(async () => {
    await h?.stop();
  });

  it("the sandbox's user is `user` with HOME=/home/user, and owns what it writes", async () => {
    const r = await sbx.commands.run('whoami; id -gn; echo "$HOME $USER"; getent passwd user | cut -d: -f6');
    expect(r.stdout).toBe("user\nuser\n/home/user user\n/home/user\n");
    await sbx.files.write("owned.txt", "x");
    const info = await sbx.files.getInfo("owned.txt");
    expect([info.owner, info.group]).toEqual(["user", "user"]);
  });

  it("sudo runs the command as the same user (a slot has no root): what needs root fails as for a non-root user", async () => {
    const r = await sbx.commands.run("sudo whoami; sudo -E -u root id -u; sudo FOO=bar sh -c 'echo $FOO'; sudo touch /etc/e2b-x 2>/dev/null; echo rc=$?; sh -c 'command -v sudo'");
    const uid = (await sbx.commands.run("id -u")).stdout;
    expect(r.stdout).toBe(`user\n${uid}bar\nrc=1\n/opt/slotpool/bin/sudo\n`);
    await expect(sbx.commands.run("sudo")).rejects.toMatchObject({ exitCode: 1, stderr: expect.stringContaining("a slot has no root") });
  });

  it("files.list is alphabetical (a directory's entries right after it); remove of a missing path succeeds", async () => {
    await sbx.commands.run("mkdir -p ord/b ord/a-b ord/a && touch ord/c ord/a/x ord/B");
    expect((await sbx.files.list("ord")).map((e) => e.name)).toEqual(["B", "a", "a-b", "b", "c"]);
    expect((await sbx.files.list("ord", { depth: 2 })).map((e) => e.path.slice("/home/user/ord/".length))).toEqual(["B", "a", "a/x", "a-b", "b", "c"]);
    await sbx.files.remove("ord/never-was");
    await sbx.files.remove("/tmp/never/was");
  });

  it("a symlink reports the type of its target and its target as an absolute path", async () => {
    await sbx.commands.run("mkdir -p ln && echo t > ln/t.txt && cd ln && ln -sf t.txt rel && ln -sf /home/user/ln abs && ln -sf gone dangling");
    const byName = Object.fromEntries((await sbx.files.list("ln")).map((e) => [e.name, e]));
    expect([byName["rel"]!.type, byName["rel"]!.symlinkTarget]).toEqual([FileType.FILE, "/home/user/ln/t.txt"]);
    expect([byName["abs"]!.type, byName["abs"]!.symlinkTarget]).toEqual([FileType.DIR, "/home/user/ln"]);
    expect(byName["dangling"]!.symlinkTarget).toBe("/home/user/ln/gone");
    expect(byName["t.txt"]!.symlinkTarget).toBeUndefined();
  });

  it("Sandbox.list: newest first, paged in that order; startedAfter filters", async () => {
    const tag = { conv: Math.random().toString(36).slice(2) };
    const made: Sandbox[] = [];
    try {
      for (let i = 0; i < 3; i++) {
        made.push(await Sandbox.create({ ...h.opts, metadata: tag }));
        await new Promise((r) => setTimeout(r, 5));
      }
      const pager = Sandbox.list({ ...h.opts, limit: 2, query: { metadata: tag } });
      const first = await pager.nextItems();
      const second = await pager.nextItems();
      expect([...first, ...second].map((s) => s.sandboxId)).toEqual(made.map((s) => s.sandboxId).reverse());
      expect(pager.hasNext).toBe(false);
      const startedAt = (await made[2]!.getInfo()).startedAt;
      const later = await Sandbox.list({ ...h.opts, query: { metadata: tag, startedAfter: startedAt } }).nextItems();
      expect(later.map((s) => s.sandboxId)).toEqual([made[2]!.sandboxId]);
    } finally {
      for (const s of made) await s.kill();
    }
  });

  it("fork answers 201; count < 1 is a 400 checked before the API key, as E2B does", async () => {
    const fork = await fetch(`${h.url}/sandboxes/${sbx.sandboxId}/fork`, { method: "POST", headers: { "x-api-key": h.apiKey, "content-type": "application/json" }, body: JSON.stringify({ count: 1 }) });
    expect(fork.status).toBe(201);
    const [child] = (await fork.json()) as Array<{ sandbox: { sandboxID: string } }>;
    expect(await Sandbox.kill(child!.sandbox.sandboxID, h.opts)).toBe(true);
    for (const apiKey of [h.apiKey, "e2b_not_the_key"]) {
      const zero = await fetch(`${h.url}/sandboxes/${sbx.sandboxId}/fork`, { method: "POST", headers: { "x-api-key": apiKey, "content-type": "application/json" }, body: JSON.stringify({ count: 0 }) });
      expect(zero.status).toBe(400);
      expect(await zero.json()).toMatchObject({ code: 400, message: expect.stringContaining("count") });
    }
    await expect(Sandbox.fork(sbx.sandboxId, { ...h.opts, count: 0 })).rejects.toBeInstanceOf(SandboxError);
  });
});
