import { z } from "zod";
import { SlotIdSchema } from "./sandbox.js";

/**
 * Port tunnels (sandbox server route `GET /ports/connect`): one TCP connection to a port
 * inside a slot's network namespace, the one its process sessions share
 * (sandbox/isolation/slot-netns.ts). The E2B server uses it to bring HTTP and WebSocket
 * traffic for `<port>-<sandboxId>.<domain>` (or `E2b-Sandbox-Port`) to a server a sandbox's
 * command started; it works across hosts (an E2B server and a Nomad allocation).
 *
 * The request is an HTTP/1.1 upgrade, with the same bearer token as every other route:
 *
 *   GET /ports/connect?slot_id=slot_0&port=8000&allow_network=false HTTP/1.1
 *   Connection: Upgrade
 *   Upgrade: slotpool-port
 *
 * Answers: `101 Switching Protocols` (`Upgrade: slotpool-port`) once the connection inside
 * the slot is made; from then on the socket carries the port's bytes both ways, and either
 * side's end (FIN) is passed on. Otherwise a JSON error (`{"error", "field"?, "port"?}`):
 * 400 a bad query (naming the field), 401/403 the token, 404 an unknown slot, 409 a paused
 * slot (or one whose generation moved on), 429 too many tunnels into the slot, 502 nothing
 * listens on that port in the slot's namespace (`port` names it), 503 tunnels unavailable on
 * this server (why).
 */

export const PORT_TUNNEL_PATH = "/ports/connect";
/** The `Upgrade` token of a port tunnel. */
export const PORT_TUNNEL_PROTOCOL = "slotpool-port";

const Bool = z.enum(["true", "false", "1", "0"]).transform((v) => v === "true" || v === "1");

export const PortTunnelQuerySchema = z
  .object({
    slot_id: SlotIdSchema,
    port: z.coerce.number().int("port must be a whole number").min(1, "port must be 1-65535").max(65535, "port must be 1-65535"),
    /** Which of the slot's namespaces: its sessions with internet (network on) or loopback only; as `/processes/start`'s. */
    allow_network: Bool.default(false),
    /** The slot generation the caller holds: refused (409) once the slot was reset or forked into since. */
    generation: z.coerce.number().int().min(0).optional(),
  })
  .strict();
export type PortTunnelQuery = z.output<typeof PortTunnelQuerySchema>;

/** What a refused tunnel answers (JSON). */
export const PortTunnelErrorSchema = z.object({ error: z.string(), field: z.string().optional(), port: z.number().int().optional() });
export type PortTunnelError = z.infer<typeof PortTunnelErrorSchema>;
