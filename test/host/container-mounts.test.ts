import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { mayChangeOwnMounts, procCovers, unmaskProc, writableCgroups } from "../../src/host/container-mounts.js";
import { OWN_MOUNT_NAMESPACE_ENV } from "../../src/host/mount-namespace.js";

/**
 * The container helpers change mounts only in a server's own mount namespace: this test
 * process is in none (no marker), so they must refuse and leave the host's mounts as they are.
 * What they do inside a container is tested in a real one: test/engines/docker-image.test.ts.
 */
describe("container mounts (uncovering /proc, writable cgroups)", () => {
  it("refuse outside a mount namespace of the server's own, changing nothing", () => {
    expect(process.env[OWN_MOUNT_NAMESPACE_ENV]).toBeUndefined();
    expect(mayChangeOwnMounts()).toBe(false);
    const before = readFileSync("/proc/self/mountinfo", "utf8");
    expect(() => unmaskProc()).toThrow(/refusing to change \/proc outside a mount namespace of the server's own/);
    expect(() => writableCgroups()).toThrow(/refusing to remount cgroups outside a mount namespace of the server's own/);
    expect(readFileSync("/proc/self/mountinfo", "utf8")).toBe(before);
  });

  it("only root in its own namespace may change them", () => {
    expect(mayChangeOwnMounts({ [OWN_MOUNT_NAMESPACE_ENV]: "1" })).toBe(process.getuid?.() === 0);
    expect(mayChangeOwnMounts({})).toBe(false);
  });

  it("lists the mounts covering parts of /proc, deepest first, and never /proc itself", () => {
    const expected = readFileSync("/proc/self/mountinfo", "utf8")
      .split("\n")
      .map((l) => l.split(" ")[4])
      .filter((p): p is string => p !== undefined && p.startsWith("/proc/"));
    const covers = procCovers();
    expect(covers.sort()).toEqual(expected.map((p) => p.replace(/\\([0-7]{3})/g, (_m, o: string) => String.fromCharCode(parseInt(o, 8)))).sort());
    expect(covers).not.toContain("/proc");
    const ordered = procCovers();
    for (let i = 1; i < ordered.length; i++) expect(ordered[i - 1]!.length).toBeGreaterThanOrEqual(ordered[i]!.length);
  });
});
