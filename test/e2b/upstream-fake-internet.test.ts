import { createHash } from "node:crypto";
import { execFileSync, spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { FAKE_HOSTS, fakeInternetMissing, makeFakeInternet } from "./upstream/fake-internet.js";

// The fake internet E2B's suites run in as root (upstream/fake-internet.ts): what a process in
// its namespaces reaches, and that nothing of the host's own network or files changes.
const missing = fakeInternetMissing();
const digest = (file: string) => createHash("sha256").update(readFileSync(file)).digest("hex");
const hostFiles = ["/etc/resolv.conf", "/etc/ssl/certs/ca-certificates.crt"];

describe("the fake internet of E2B's suites", () => {
  it.skipIf(missing !== undefined)(`answers what E2B's tests curl, over TLS its CA verifies, in its namespaces only; gone after${missing ? ` (skipped: ${missing})` : ""}`, async () => {
    const before = hostFiles.map(digest);
    const internet = await makeFakeInternet();
    try {
      const curl = (args: string) => {
        const w = internet.wrap("sh", ["-c", `curl -s -o /dev/null -w '%{http_code}' ${args}; echo " $?"`]);
        return execFileSync(w.command, w.args, { encoding: "utf8" }).trim();
      };
      // E2B's tests' own commands (test/e2b/upstream/js/sandbox/network.test.ts, internetAccess.test.ts); exit 0 means TLS verified.
      expect(curl("https://1.1.1.1")).toBe("301 0");
      expect(curl("https://8.8.8.8")).toBe("302 0");
      expect(curl("https://connectivitycheck.gstatic.com/generate_204")).toBe("204 0");
      expect(curl("http://1.1.1.1")).toBe("301 0");
      // A name the fake DNS does not hold does not resolve (6); an address nobody owns is never answered
      // (the internet's namespace forwards nothing): curl gives up at its connect timeout (28) or is refused (7).
      expect(curl("https://example.com")).toBe("000 6");
      expect(curl("--connect-timeout 3 https://9.9.9.9")).toMatch(/^000 (7|28)$/);
      // The run's CA is the bundle inside; the host's files are the host's.
      const w = internet.wrap("sh", ["-c", "cat /etc/ssl/certs/ca-certificates.crt; cat /etc/resolv.conf; getent hosts connectivitycheck.gstatic.com"]);
      const inside = execFileSync(w.command, w.args, { encoding: "utf8" });
      expect(inside).toBe(`${readFileSync(internet.caFile, "utf8")}nameserver ${FAKE_HOSTS.google}\n${FAKE_HOSTS.connectivityCheck}   connectivitycheck.gstatic.com\n`);
      expect(hostFiles.map(digest)).toEqual(before);
    } finally {
      internet.remove();
    }
    const netns = spawnSync("ip", ["netns", "list"], { encoding: "utf8" }).stdout;
    for (const ns of internet.namespaces) expect(netns).not.toContain(ns);
    expect(hostFiles.map(digest)).toEqual(before);
  }, 120_000);
});
