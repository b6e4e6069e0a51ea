/**
 * The client's TLS settings (NOMAD_CACERT, NOMAD_CLIENT_CERT/KEY, NOMAD_SKIP_VERIFY) against
 * a real HTTPS server on loopback: this is what shows that an undici Agent given to Node's
 * built-in fetch as `dispatcher` really carries the TLS options.
 */
import { readFileSync } from "node:fs";
import { createServer, type Server } from "node:https";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import type { TLSSocket } from "node:tls";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { NomadClient } from "../../src/nomad/client.js";
import { NomadUnreachableError } from "../../src/nomad/errors.js";

/**
 * Test-only PKI (no secret protects anything): a CA, a server certificate for IP 127.0.0.1
 * and a client certificate, valid until 2126, made once with openssl so the test needs no
 * openssl binary.
 */
const dir = join(dirname(fileURLToPath(import.meta.url)), "tls");
let server: Server;
let address: string;
let lastClientCertCN: string | undefined;

beforeAll(async () => {
  server = createServer(
    {
      key: readFileSync(join(dir, "server.key")),
      cert: readFileSync(join(dir, "server.pem")),
      ca: readFileSync(join(dir, "ca.pem")),
      requestCert: true,
      rejectUnauthorized: false,
    },
    (req, res) => {
      const peer = (req.socket as TLSSocket).getPeerCertificate();
      lastClientCertCN = peer && "subject" in peer && peer.subject ? String(peer.subject.CN) : undefined;
      res.setHeader("Content-Type", "application/json");
      res.end('"127.0.0.1:4647"');
    },
  );
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const port = (server.address() as { port: number }).port;
  address = `https://127.0.0.1:${port}`;
});

afterAll(async () => {
  await new Promise((resolve) => server.close(resolve));
});

describe("TLS like the nomad CLI", () => {
  it("verifies the agent with NOMAD_CACERT and presents the NOMAD_CLIENT_CERT", async () => {
    const client = NomadClient.fromEnv({}, {
      NOMAD_ADDR: address,
      NOMAD_CACERT: join(dir, "ca.pem"),
      NOMAD_CLIENT_CERT: join(dir, "client.pem"),
      NOMAD_CLIENT_KEY: join(dir, "client.key"),
    });
    expect(await client.leader()).toBe("127.0.0.1:4647");
    expect(lastClientCertCN).toBe("client.global.nomad");
    await client.close();
  });

  it("refuses an agent it cannot verify, at once and without retrying", async () => {
    const client = new NomadClient({ address, retry: { attempts: 5, baseMs: 1_000, maxMs: 1_000 } });
    const started = Date.now();
    const err = await client.leader().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(NomadUnreachableError);
    expect((err as Error).message).toMatch(/NOMAD_CACERT/);
    // bound: retried, the 5 attempts' 1 s back-offs would take 4 s: 3 s tells the two apart with room for a loaded box.
    expect(Date.now() - started).toBeLessThan(3_000);
    await client.close();
  });

  it("NOMAD_SKIP_VERIFY=true skips verification", async () => {
    const client = NomadClient.fromEnv({}, { NOMAD_ADDR: address, NOMAD_SKIP_VERIFY: "true" });
    expect(await client.leader()).toBe("127.0.0.1:4647");
    await client.close();
  });
});
