/**
 * E2B's egress rules through the real JS SDK (src/e2b/sandbox-egress.ts over the slot's egress
 * rules, protocol/egress.ts): `network.allowOut` / `denyOut` at create (`ALL_TRAFFIC` too),
 * allow taking precedence over deny, `updateNetwork` replacing them (an omitted list cleared,
 * `allowInternetAccess: false` denying all), getInfo listing them, a fork and a filesystem-only
 * pause keeping them, and what is not built refused with a 400 naming the field.
 *
 * The outside hosts are the test's own network namespace (test/support/outside-hosts.ts,
 * root only); without root, the checks that need no outside host run.
 */
import { ALL_TRAFFIC, CommandExitError, Sandbox } from "e2b";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startE2b, type E2bHarness } from "./helpers.js";
import { makeOutsideHosts, type OutsideHosts } from "../support/outside-hosts.js";

const isRoot = process.getuid?.() === 0;
let outside: OutsideHosts | undefined;
let A = "";
let B = "";
let h: E2bHarness;

beforeAll(async () => {
  if (isRoot) {
    outside = await makeOutsideHosts(2, 18082);
    [A, B] = outside.addresses as [string, string];
  }
  h = await startE2b({ slots: 4, allowNetwork: true });
}, 120_000);

afterAll(async () => {
  await h?.stop();
  outside?.remove();
});

/** What curl from the sandbox gets from `addr`: its answer, or "refused" when the command failed (CommandExitError). */
async function reach(sbx: Sandbox, addr: string): Promise<string> {
  try {
    return (await sbx.commands.run(`curl -sS -m 5 http://${addr}:${outside!.port}/`)).stdout.trim();
  } catch (err) {
    if (err instanceof CommandExitError) return "refused";
    throw err;
  }
}

describe("E2B egress rules (network.allowOut / denyOut, updateNetwork)", () => {
  it.skipIf(!isRoot)("denyOut refuses, allowOut wins over ALL_TRAFFIC, updateNetwork replaces the rules; getInfo lists them (skipped without root: no network namespace for the outside hosts)", async () => {
    const sbx = await Sandbox.create({ ...h.opts, network: { denyOut: [B] } });
    expect(await reach(sbx, A)).toBe(`outside ${A}`);
    expect(await reach(sbx, B)).toBe("refused");
    expect((await sbx.getInfo()).network).toMatchObject({ denyOut: [B] });

    const only = await Sandbox.create({ ...h.opts, network: { denyOut: ({ allTraffic }) => [allTraffic], allowOut: [A] } });
    expect(await reach(only, A)).toBe(`outside ${A}`);
    expect(await reach(only, B)).toBe("refused");

    // An update replaces every rule; what it leaves out is cleared.
    await only.updateNetwork({});
    expect(await reach(only, B)).toBe(`outside ${B}`);
    expect((await only.getInfo()).network?.denyOut ?? []).toEqual([]);
    await sbx.updateNetwork({ denyOut: [A] });
    expect(await reach(sbx, A)).toBe("refused");
    expect(await reach(sbx, B)).toBe(`outside ${B}`);
    await sbx.updateNetwork({ allowInternetAccess: false });
    expect(await reach(sbx, B)).toBe("refused");
    expect((await sbx.getInfo()).network).toMatchObject({ denyOut: [ALL_TRAFFIC] });
    await Promise.all([sbx.kill(), only.kill()]);
  }, 120_000);

  it.skipIf(!isRoot)("a fork and a filesystem-only pause keep the rules; the next sandbox on the slot starts without them (skipped without root: no network namespace for the outside hosts)", async () => {
    const sbx = await Sandbox.create({ ...h.opts, network: { denyOut: [A] } });
    const [forked] = await sbx.fork({ count: 1 });
    if (!(forked instanceof Sandbox)) throw forked ?? new Error("no fork");
    const child = forked;
    expect(await reach(child, A)).toBe("refused");
    expect(await reach(child, B)).toBe(`outside ${B}`);
    await sbx.pause({ keepMemory: false });
    await sbx.connect();
    expect(await reach(sbx, A)).toBe("refused");
    await Promise.all([sbx.kill(), child.kill()]);
    // Every slot was reset at kill: none carries the rules on.
    const next = await Promise.all([0, 1, 2, 3].map(() => Sandbox.create(h.opts)));
    for (const n of next) expect(await reach(n, A)).toBe(`outside ${A}`);
    await Promise.all(next.map((n) => n.kill()));
  }, 120_000);

  it("a rule the slot cannot enforce is a 400 naming it, and no sandbox is left behind", async () => {
    const before = (await Sandbox.list(h.opts).nextItems()).length;
    await expect(Sandbox.create({ ...h.opts, network: { allowOut: ["example.com"], denyOut: [ALL_TRAFFIC] } })).rejects.toThrow(/network\.allowOut\.0.*domain name/);
    await expect(Sandbox.create({ ...h.opts, network: { denyOut: ["2001:db8::/32"] } })).rejects.toThrow(/network\.denyOut\.0.*IPv4/);
    await expect(Sandbox.create({ ...h.opts, network: { rules: { "api.example.com": [{ transform: { headers: { "X-A": "b" } } }] } } })).rejects.toThrow(/network\.rules: header transforms/);
    await expect(Sandbox.create({ ...h.opts, network: { egressProxy: { address: "proxy.example.com:1080" } } })).rejects.toThrow(/network\.egressProxy/);
    expect((await Sandbox.list(h.opts).nextItems()).length).toBe(before);
    const sbx = await Sandbox.create(h.opts);
    await expect(sbx.updateNetwork({ denyOut: ["not-an-ip"] })).rejects.toThrow(/body\.denyOut\.0/);
    await sbx.kill();
    // A sandbox without internet keeps its rules for getInfo; nothing leaves it anyway.
    const off = await Sandbox.create({ ...h.opts, allowInternetAccess: false, network: { denyOut: ["203.0.113.0/24"] } });
    expect((await off.getInfo()).network).toMatchObject({ denyOut: ["203.0.113.0/24"] });
    await expect(off.updateNetwork({ allowInternetAccess: true })).rejects.toThrow(/cannot be given it after create/);
    await off.kill();
  }, 60_000);

  it("the rules are in force before create answers: denying all traffic refuses even the DNS forwarder to the sandbox's first command", async (ctx) => {
    // The slot's DNS forwarder (10.0.2.3:53, network.ts) answers a sandbox without rules: the control.
    const probe = `timeout 5 bash -c "exec 3<>/dev/tcp/10.0.2.3/53" 2>/dev/null; echo "dns=$?"`;
    const open = await Sandbox.create(h.opts);
    const control = (await open.commands.run(probe)).stdout.trim();
    await open.kill();
    if (control !== "dns=0") ctx.skip(`skipped without a DNS forwarder in the slots (${control}): nothing to refuse`);
    const sbx = await Sandbox.create({ ...h.opts, network: { denyOut: [ALL_TRAFFIC] } });
    expect((await sbx.commands.run(probe)).stdout.trim()).toBe("dns=1");
    await sbx.kill();
  }, 60_000);
});
