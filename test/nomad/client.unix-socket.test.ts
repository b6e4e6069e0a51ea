/**
 * NOMAD_ADDR=unix:///…/api.sock: the agent reached over a unix socket (inside a Nomad task
 * that is the Task API socket, secrets/api.sock), here a real HTTP server on a socket file.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { createServer, type IncomingHttpHeaders, type Server } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { NomadClient } from "../../src/nomad/client.js";
import { NomadUnreachableError } from "../../src/nomad/errors.js";

let dir: string;
let server: Server;
let socket: string;
const seen: Array<{ url: string | undefined; headers: IncomingHttpHeaders }> = [];

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "nomad-sock-"));
  socket = join(dir, "api.sock");
  server = createServer((req, res) => {
    seen.push({ url: req.url, headers: req.headers });
    res.setHeader("Content-Type", "application/json");
    res.setHeader("X-Nomad-Index", "12");
    res.end(req.url?.startsWith("/v1/job/") ? "[]" : '"127.0.0.1:4647"');
  });
  await new Promise<void>((resolve) => server.listen(socket, resolve));
});

afterAll(async () => {
  await new Promise((resolve) => server.close(resolve));
  rmSync(dir, { recursive: true, force: true });
});

describe("NOMAD_ADDR=unix://", () => {
  it("talks HTTP over the socket, with the token and the namespace", async () => {
    const client = NomadClient.fromEnv({}, { NOMAD_ADDR: `unix://${socket}`, NOMAD_TOKEN: "wi-token", NOMAD_NAMESPACE: "ml" });
    expect(await client.leader()).toBe("127.0.0.1:4647");
    expect(await client.jobAllocations("sbx")).toEqual({ allocations: [], index: 12 });
    expect(seen.map((s) => s.url)).toEqual(["/v1/status/leader?namespace=ml", "/v1/job/sbx/allocations?namespace=ml"]);
    expect(seen[0]!.headers["x-nomad-token"]).toBe("wi-token");
    expect(client.address).toBe(`unix://${socket}`);
    await client.close();
  });

  it("a missing socket is unreachable, named in the error", async () => {
    const client = new NomadClient({ address: `unix://${join(dir, "nope.sock")}`, retry: { attempts: 1 } });
    const err = await client.leader().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(NomadUnreachableError);
    expect((err as Error).message).toContain("nope.sock");
    await client.close();
  });
});
