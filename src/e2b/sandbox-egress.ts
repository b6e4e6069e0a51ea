import { z } from "zod";
import { normalizeIpv4Range, MAX_EGRESS_ENTRIES, type EgressRules } from "../protocol/egress.js";
import { E2bApiError } from "./errors.js";

/**
 * E2B's egress rules (`network.allowOut` / `denyOut` at create, `PUT /sandboxes/{id}/network`
 * after) as a slot's egress rules (protocol/egress.ts: nftables in the slot's network
 * namespace). E2B's meaning, kept: entries are IPs or CIDR ranges (`ALL_TRAFFIC` is
 * `0.0.0.0/0`); an allowed destination is reachable even when a denied range covers it;
 * `allow_internet_access: false` in an update is `denyOut: ["0.0.0.0/0"]`; an update replaces
 * every rule (an omitted list is cleared). Not built, each refused with a 400 naming it:
 * domain names in `allowOut` (E2B filters them by TLS SNI / HTTP Host in its egress proxy),
 * header transforms (`rules`), a SOCKS5 `egressProxy` (docs/e2b.md, "Egress rules").
 */

/** What E2B reports back (getInfo's `network.allowOut` / `denyOut`), beside the rules in force. */
export interface SandboxEgress {
  allowOut: string[];
  denyOut: string[];
}

export const NO_EGRESS: SandboxEgress = { allowOut: [], denyOut: [] };

const List = z.array(z.string().max(256)).max(MAX_EGRESS_ENTRIES);

/** The egress part of create's `network` and of the update's body (the rest of `network` is checked by the control plane). */
export const EgressFieldsSchema = z.object({
  allowOut: List.optional(),
  denyOut: List.optional(),
  rules: z.record(z.string(), z.unknown()).optional(),
  egressProxy: z.unknown().optional(),
});

export const NetworkUpdateBodySchema = EgressFieldsSchema.extend({ allow_internet_access: z.boolean().optional() });

/**
 * The rules `fields` ask for, each entry checked (`field` prefixes the names in errors:
 * `network` at create, `body` for an update); E2B's lists are kept as given for getInfo.
 */
export function egressFrom(fields: z.output<typeof EgressFieldsSchema>, field: string): { egress: SandboxEgress; rules: EgressRules } {
  if (fields.rules && Object.keys(fields.rules).length > 0) {
    throw new E2bApiError(400, `${field}.rules: header transforms are not supported by slotpool (they need an egress proxy that terminates TLS; see docs/e2b.md, "Egress rules")`, `${field}.rules`);
  }
  if (fields.egressProxy !== undefined && fields.egressProxy !== null) {
    throw new E2bApiError(400, `${field}.egressProxy: tunnelling a sandbox's traffic through a SOCKS5 proxy is not supported by slotpool (docs/e2b.md, "Egress rules")`, `${field}.egressProxy`);
  }
  const ranges = (list: string[] | undefined, name: "allowOut" | "denyOut"): string[] =>
    (list ?? []).map((entry, i) => {
      const r = normalizeIpv4Range(entry);
      if (r !== undefined) return r;
      const where = `${field}.${name}.${i}`;
      if (name === "allowOut" && /[a-z]/i.test(entry) && !entry.includes(":")) {
        throw new E2bApiError(400, `${where}: '${entry}' is a domain name: slotpool filters egress by address only (IPv4 addresses and CIDR ranges); domain rules need an egress proxy it does not have (docs/e2b.md, "Egress rules")`, where);
      }
      throw new E2bApiError(400, `${where}: '${entry}' is not an IPv4 address or CIDR range (like 8.8.8.8 or 8.8.8.0/24; slots have no IPv6 route)`, where);
    });
  const allow = ranges(fields.allowOut, "allowOut");
  const deny = ranges(fields.denyOut, "denyOut");
  return { egress: { allowOut: fields.allowOut ?? [], denyOut: fields.denyOut ?? [] }, rules: { allow, deny } };
}

/** Whether any rule is set. */
export function hasEgress(e: SandboxEgress): boolean {
  return e.allowOut.length > 0 || e.denyOut.length > 0;
}
