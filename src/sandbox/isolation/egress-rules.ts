import { spawn } from "node:child_process";
import type { EgressRules } from "../../protocol/egress.js";
import { withoutCapabilities } from "../../host/mount-namespace.js";
import { SANDBOX_PATH } from "./isolation.js";

/**
 * A slot's egress rules (protocol/egress.ts) as nftables rules in its shared network
 * namespace (slot-netns.ts), beside the DNS-only filter network.ts sets there. One table of
 * their own, replaced whole in one nftables transaction (the old rules hold until the new
 * ones do): loopback always passes (the slot's own servers), then `allow` (accepted, so a
 * `deny` covering it does not apply: allow takes precedence), then `deny` (refused at once:
 * a TCP reset, or ICMP administratively prohibited). Nothing inside the slot can change them:
 * its processes have no capability over that namespace (the holder's user namespace owns it).
 */

export const EGRESS_TABLE = "slotpool_egress";

/** The `nft -f -` script that makes `rules` the table's content (no rules: no table). */
export function egressScript(rules: EgressRules): string {
  // Created first so that the delete never fails: the standard idiom for "replace" in one transaction.
  const lines = [`table ip ${EGRESS_TABLE}`, `delete table ip ${EGRESS_TABLE}`];
  if (rules.allow.length === 0 && rules.deny.length === 0) return lines.join("\n") + "\n";
  const set = (name: string, ranges: readonly string[]) =>
    ranges.length > 0 ? [`  set ${name} {`, "    type ipv4_addr; flags interval; auto-merge;", `    elements = { ${ranges.join(", ")} }`, "  }"] : [];
  lines.push(
    `table ip ${EGRESS_TABLE} {`,
    ...set("allow", rules.allow),
    ...set("deny", rules.deny),
    "  chain output {",
    // After the DNS filter (priority 0): it rejects what is not DNS to the forwarder first.
    "    type filter hook output priority 10; policy accept;",
    '    oifname "lo" accept',
    ...(rules.allow.length > 0 ? ["    ip daddr @allow accept"] : []),
    ...(rules.deny.length > 0 ? ["    ip daddr @deny meta l4proto tcp reject with tcp reset", "    ip daddr @deny reject with icmp type admin-prohibited"] : []),
    "  }",
    "}",
  );
  return lines.join("\n") + "\n";
}

export class EgressRulesError extends Error {
  override name = "EgressRulesError";
  readonly code = "egress_rules_failed";
}

/**
 * Runs `script` with nft inside the network namespace of `holderPid` (a slot's holder). A root
 * server enters only that network namespace (root may, whichever user namespace owns it: the
 * holder's own, or an image slot's); one that is not root enters the holder's user namespace
 * too, as `owner` (where it is root), the way sessions join it.
 */
export function applyEgress(tools: { nsenter: string; nft: string }, holderPid: number, owner: { uid: number; gid: number } | undefined, script: string): Promise<void> {
  const root = process.getuid?.() === 0;
  const start = root
    ? { file: tools.nsenter, args: [`--net=/proc/${holderPid}/ns/net`, "--", tools.nft, "-f", "-"] }
    : withoutCapabilities(tools.nsenter, ["--user", "--net", "--preserve-credentials", `--target=${holderPid}`, "--", tools.nft, "-f", "-"]);
  return new Promise((resolve, reject) => {
    const child = spawn(start.file, start.args, { stdio: ["pipe", "ignore", "pipe"], env: { PATH: SANDBOX_PATH }, cwd: "/", ...(owner && !root ? { uid: owner.uid, gid: owner.gid } : {}) });
    let err = "";
    child.stderr!.setEncoding("utf8");
    child.stderr!.on("data", (d: string) => (err = (err + d).slice(-2000)));
    child.stdin!.on("error", () => undefined);
    child.once("error", (e) => reject(new EgressRulesError(`could not run nft in the slot's network namespace: ${e.message}`)));
    child.once("close", (code, signal) => (code === 0 ? resolve() : reject(new EgressRulesError(`nft in the slot's network namespace failed (code ${code}, signal ${signal}): ${err.trim()}`))));
    child.stdin!.end(script);
  });
}
