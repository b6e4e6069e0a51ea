/**
 * Egress rules of a slot's process sessions (`POST /processes/egress`, protocol/egress.ts;
 * nftables in the slot's shared network namespace, isolation/egress-rules.ts): what they
 * deny is refused at once, what they allow is reachable even under a denied range, the
 * slot's own loopback always passes, a new call replaces them, they apply to what already
 * runs, survive kill-all (E2B's filesystem-only pause) and end with the slot's reset.
 *
 * The "outside" is the test's own (as in test/security/network-hygiene.test.ts): a network
 * namespace with two addresses in 198.18.N.0/29 (a benchmark range, not private), an HTTP
 * server answering which address was asked. Creating it needs root; without root only the
 * checks that need no outside host run (the refusals, the DNS forwarder's port, bad bodies).
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { isRoot, readEvents, startServer, type TestServer } from "./helpers.js";
import { makeOutsideHosts, type OutsideHosts } from "../support/outside-hosts.js";

let outside: OutsideHosts | undefined;
let A = "";
let B = "";
let PORT = 0;
let s: TestServer;

beforeAll(async () => {
  if (isRoot) {
    outside = await makeOutsideHosts(2);
    [A, B] = outside.addresses as [string, string];
    PORT = outside.port;
  }
  // After the outside exists: the veth's host side counts as the host's (unreachable from slots).
  s = await startServer({ slots: 2 });
}, 120_000);

afterAll(async () => {
  await s?.stop();
  outside?.remove();
});

/** Runs `script` as a network-on process session of `slot`; its stdout (after `stdin` lines, if any, are written). */
async function session(slot: string, script: string, beforeInput?: () => Promise<void>): Promise<string> {
  const res = await fetch(s.url + "/processes/start", { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ slot_id: slot, cmd: "/bin/bash", args: ["-c", script], allow_network: true, stdin: beforeInput !== undefined }) });
  expect(res.status).toBe(200);
  const events: Array<{ type: string; pid?: number; data?: string }> = [];
  const done = readEvents(res, events);
  if (beforeInput) {
    while (events.length === 0) await new Promise((r) => setTimeout(r, 10));
    const pid = events[0]!.pid!;
    await beforeInput();
    expect((await s.post("/processes/input", { slot_id: slot, pid, data: Buffer.from("go\n").toString("base64") })).status).toBe(200);
    expect((await s.post("/processes/close-stdin", { slot_id: slot, pid })).status).toBe(200);
  }
  await done;
  return events
    .filter((e) => e.type === "stdout")
    .map((e) => Buffer.from(e.data!, "base64").toString("utf8"))
    .join("")
    .trim();
}

/** curl of each address from the slot: the body, or "refused" (ECONNREFUSED: the rules' TCP reset), or "failed <curl's exit code>". */
const CURL = (addrs: string[]) =>
  addrs.map((a) => `body=$(curl -sS -v -m 5 http://${a}:${PORT}/ 2>/tmp/curl.err); rc=$?; if [ $rc = 0 ]; then echo "$body"; elif [ $rc = 7 ] && grep -q "failed: Connection refused" /tmp/curl.err; then echo refused; else echo "failed $rc"; fi`).join("; ");

async function setRules(slot: string, allow: string[], deny: string[]) {
  return s.post("/processes/egress", { slot_id: slot, allow, deny });
}

describe("egress rules of a slot's process sessions", () => {
  it.skipIf(!isRoot)("deny refuses at once, allow takes precedence, loopback passes; a new call replaces them and they apply to what already runs (skipped without root: no network namespace for the outside hosts)", async () => {
    expect(await session("slot_0", CURL([A, B]))).toBe(`outside ${A}\noutside ${B}`);

    const d = await setRules("slot_0", [], [B]);
    expect(d.status, d.text).toBe(200);
    expect(d.json).toEqual({ allow: [], deny: [`${B}/32`] });
    expect(await session("slot_0", CURL([A, B]))).toBe(`outside ${A}\nrefused`);

    // Deny all but A: A passes (allow wins), B does not; the slot's own loopback server still answers.
    expect((await setRules("slot_0", [A], ["0.0.0.0/0"])).status).toBe(200);
    const loop = `python3 -m http.server 8000 --bind 127.0.0.1 >/dev/null 2>&1 & for i in $(seq 100); do curl -s -o /dev/null http://127.0.0.1:8000/ && break; sleep 0.1; done; curl -s -o /dev/null -w 'loopback %{http_code}\\n' http://127.0.0.1:8000/; kill %1`;
    expect(await session("slot_0", `${CURL([A, B])}; ${loop}`)).toBe(`outside ${A}\nrefused\nloopback 200`);

    // A session started before the change sees the new rules once they are answered.
    const running = session("slot_0", `read -r go; ${CURL([A, B])}`, async () => {
      expect((await setRules("slot_0", [], [A])).status).toBe(200);
    });
    expect(await running).toBe(`refused\noutside ${B}`);

    expect((await setRules("slot_0", [], [])).status).toBe(200);
    expect(await session("slot_0", CURL([A, B]))).toBe(`outside ${A}\noutside ${B}`);
  }, 120_000);

  it.skipIf(!isRoot)("survive kill-all (E2B's filesystem-only pause), end with the reset; another slot is not affected (skipped without root: no network namespace for the outside hosts)", async () => {
    expect((await setRules("slot_1", [], [A])).status).toBe(200);
    expect(await session("slot_1", CURL([A]))).toBe("refused");
    expect(await session("slot_0", CURL([A]))).toBe(`outside ${A}`);
    expect((await s.post("/processes/kill-all", { slot_id: "slot_1" })).status).toBe(200);
    expect(await session("slot_1", CURL([A]))).toBe("refused");
    expect((await s.post("/reset", { slot_id: "slot_1" })).status).toBe(200);
    expect(await session("slot_1", CURL([A]))).toBe(`outside ${A}`);
  }, 120_000);

  it("deny of all traffic refuses even the DNS forwarder (no name resolution leaks out), which answers again once the rules are gone", async (ctx) => {
    const health = await s.get("/health");
    if (health.json.internet !== "slirp4netns" || health.json.dns !== "dns_only") ctx.skip("skipped without a DNS-only forwarder in the slots (/health says why)");
    const probe = 'timeout 5 bash -c "exec 3<>/dev/tcp/10.0.2.3/53" 2>/dev/null; echo "dns=$?"';
    expect(await session("slot_1", probe)).toBe("dns=0");
    expect((await setRules("slot_1", [], ["0.0.0.0/0"])).status).toBe(200);
    expect(await session("slot_1", probe)).toBe("dns=1");
    expect((await setRules("slot_1", [], [])).status).toBe(200);
    expect(await session("slot_1", probe)).toBe("dns=0");
  }, 60_000);

  it("refuses entries that are not IPv4 addresses or ranges, naming the entry, and keeps the rules it had", async () => {
    expect((await setRules("slot_1", [], ["203.0.113.9"])).status).toBe(200);
    for (const [body, field] of [
      [{ slot_id: "slot_1", allow: ["example.com"], deny: [] }, "allow.0"],
      [{ slot_id: "slot_1", allow: [], deny: ["8.8.8.8", "10.0.0.0/33"] }, "deny.1"],
      [{ slot_id: "slot_1", allow: [], deny: ["2001:db8::/32"] }, "deny.0"],
    ] as const) {
      const r = await s.post("/processes/egress", body);
      expect(r.status, r.text).toBe(400);
      expect(r.json.field).toBe(field);
    }
    const extra = await s.post("/processes/egress", { slot_id: "slot_1", deny: [], extra: 1 });
    expect(extra.status).toBe(400);
    expect(extra.text).toContain("extra");
    const kept = await setRules("slot_1", [], ["203.0.113.9", "203.0.113.0/24"]);
    expect(kept.json).toEqual({ allow: [], deny: ["203.0.113.9/32", "203.0.113.0/24"] });
    expect((await setRules("slot_1", [], [])).status).toBe(200);
  });
});
