// runs as each user: the server reads and writes a slot's files as the slot's uid as root, as its own uid in its user namespace otherwise
import { FileNotFoundError, InvalidArgumentError, Sandbox, SandboxError } from "e2b";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startE2b, type E2bHarness } from "./helpers.js";

/**
 * The filesystem API and /files reach every path the sandbox's own commands reach, with the
 * same meaning (they run inside the slot's sandbox as its uid): E2B code writes to /tmp,
 * /var/tmp, /dev/shm and reads the image, and fails where a command would fail.
 */
describe("E2B filesystem API on every path the sandbox's processes use", () => {
  let h: E2bHarness;
  let sbx: Sandbox;
  beforeAll(async () => {
    h = await startE2b({ slots: 2 });
    sbx = await Sandbox.create(h.opts);
  }, 120_000);
  afterAll(async () => {
    await h?.stop();
  });

  it("writes where a command can write (workspace, /tmp, /var/tmp, /dev/shm) and commands see them; reads and lists what commands see", async () => {
    for (const dir of ["/tmp/e2b-a/b", "/var/tmp/e2b", "/dev/shm/e2b", "/home/user/sub"]) {
      await sbx.files.write(`${dir}/f.txt`, `in ${dir}`);
      expect((await sbx.commands.run(`cat ${dir}/f.txt`)).stdout).toBe(`in ${dir}`);
      expect(await sbx.files.read(`${dir}/f.txt`)).toBe(`in ${dir}`);
      expect((await sbx.files.list(dir)).map((e) => e.name)).toEqual(["f.txt"]);
    }
    await sbx.commands.run("mkdir -p /tmp/by-cmd && echo made > /tmp/by-cmd/x");
    expect(await sbx.files.read("/tmp/by-cmd/x")).toBe("made\n");
    expect(await sbx.files.exists("/tmp/by-cmd/x")).toBe(true);
    await sbx.files.rename("/tmp/by-cmd/x", "/home/user/moved.txt");
    expect((await sbx.commands.run("cat moved.txt")).stdout).toBe("made\n");
    await sbx.files.remove("/tmp/e2b-a");
    expect((await sbx.commands.run("test -e /tmp/e2b-a; echo $?")).stdout).toBe("1\n");
    const root = (await sbx.files.list("/")).map((e) => e.name);
    expect(root).toEqual(expect.arrayContaining(["home", "tmp", "usr"]));
    const hostname = (await sbx.commands.run("cat /etc/hostname")).stdout;
    expect(await sbx.files.read("/etc/hostname")).toBe(hostname);
  });

  it("relative paths and multipart names resolve against /home/user", async () => {
    await sbx.files.write("rel/a.txt", "A");
    await sbx.files.write([{ path: "multi/1.txt", data: "one" }, { path: "/tmp/multi/2.txt", data: "two" }]);
    expect((await sbx.commands.run("cat /home/user/rel/a.txt /home/user/multi/1.txt /tmp/multi/2.txt")).stdout).toBe("Aonetwo");
    expect((await sbx.files.getInfo("rel/a.txt")).path).toBe("/home/user/rel/a.txt");
  });

  it("fails where a command would: read-only image, missing paths", async () => {
    expect((await sbx.commands.run("echo x > /etc/e2b-test 2>/dev/null; echo $?")).stdout).not.toBe("0\n");
    await expect(sbx.files.write("/etc/e2b-test", "x")).rejects.toBeInstanceOf(SandboxError);
    await expect(sbx.files.makeDir("/usr/e2b-test")).rejects.toBeInstanceOf(SandboxError);
    await expect(sbx.files.read("/tmp/nope/none.txt")).rejects.toBeInstanceOf(FileNotFoundError);
    await expect(sbx.files.getInfo("/nope")).rejects.toBeInstanceOf(FileNotFoundError);
    await expect(sbx.files.read("")).rejects.toBeInstanceOf(InvalidArgumentError);
  });

  it("git init of a repository under /tmp works through the SDK's git helpers", async () => {
    await sbx.git.init("/tmp/test-git/repo", { initialBranch: "main" });
    await sbx.files.write("/tmp/test-git/repo/README.md", "hello\n");
    await sbx.git.add("/tmp/test-git/repo");
    const st = await sbx.git.status("/tmp/test-git/repo");
    expect(st.fileStatus.map((f) => f.name)).toContain("README.md");
  });
});
