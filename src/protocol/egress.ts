import { z } from "zod";
import { SlotIdSchema } from "./sandbox.js";

/**
 * Egress rules of a slot's process sessions (sandbox server route `POST /processes/egress`):
 * which outside addresses the slot's shared network namespace (isolation/slot-netns.ts) may
 * reach, on top of what network on always keeps out (the host, private ranges, link-local:
 * isolation/network.ts). E2B's `network.allowOut` / `denyOut` (src/e2b) are built on them.
 *
 *   POST /processes/egress {slot_id, allow: [cidr…], deny: [cidr…]} → {allow, deny} (normalized)
 *
 * A destination in `allow` is reachable even when `deny` covers it (allow takes precedence);
 * one in `deny` and not in `allow` is refused at once (TCP reset, ICMP for the rest); the rest
 * goes out as before. `deny: ["0.0.0.0/0"]` denies everything, DNS included, but the slot's
 * own loopback. Each call replaces the slot's rules (both lists empty: none). They hold
 * until the slot's reset, across its sessions' ends (E2B's filesystem-only pause keeps them),
 * and apply at once to what already runs. Entries are IPv4 addresses or ranges (`8.8.8.8`,
 * `8.8.8.0/24`); slots have no IPv6 route. Answers 400 naming a bad entry, 503 where rules
 * cannot be enforced (no nftables): never a slot without the rules it was given.
 */

/** At most this many entries per list (an nftables set each: the lookup costs the same however many). */
export const MAX_EGRESS_ENTRIES = 1024;

/** "a.b.c.d" or "a.b.c.d/n" as the range's base and prefix ("8.8.8.8/32"), or undefined when it is neither. */
export function normalizeIpv4Range(entry: string): string | undefined {
  const m = /^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})(?:\/(\d{1,2}))?$/.exec(entry.trim());
  if (!m) return undefined;
  const octets = m.slice(1, 5).map(Number);
  const bits = m[5] === undefined ? 32 : Number(m[5]);
  if (octets.some((o) => o > 255) || bits > 32) return undefined;
  const addr = ((octets[0]! << 24) | (octets[1]! << 16) | (octets[2]! << 8) | octets[3]!) >>> 0;
  const mask = bits === 0 ? 0 : (0xffffffff << (32 - bits)) >>> 0;
  const base = (addr & mask) >>> 0;
  return `${[24, 16, 8, 0].map((s) => (base >>> s) & 255).join(".")}/${bits}`;
}

const Range = z.string().transform((v, ctx) => {
  const r = normalizeIpv4Range(v);
  if (r === undefined) {
    ctx.addIssue({ code: "custom", message: `'${v}' is not an IPv4 address or range like 8.8.8.8 or 8.8.8.0/24` });
    return z.NEVER;
  }
  return r;
});

export const EgressRulesSchema = z
  .object({
    allow: z.array(Range).max(MAX_EGRESS_ENTRIES).default([]),
    deny: z.array(Range).max(MAX_EGRESS_ENTRIES).default([]),
  })
  .strict();
export type EgressRules = z.output<typeof EgressRulesSchema>;

export const SlotEgressRequestSchema = EgressRulesSchema.extend({ slot_id: SlotIdSchema }).strict();
export type SlotEgressRequest = z.input<typeof SlotEgressRequestSchema>;
