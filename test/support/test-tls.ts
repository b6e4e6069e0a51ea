import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { findExecutable } from "../../src/host/executables.js";

/**
 * A throwaway certificate authority and a certificate signed by it for `*.<domain>` (and
 * `<domain>`, `localhost`, `*.localhost`, 127.0.0.1), made with the openssl command line for
 * the tests that serve HTTPS (the E2B server's getHost URLs). Nothing leaves the temp dir.
 */
export interface TestTls {
  dir: string;
  caFile: string;
  certFile: string;
  keyFile: string;
  ca: Buffer;
  cert: Buffer;
  key: Buffer;
  remove(): void;
}

export const opensslMissing = findExecutable("openssl") === null;

export function makeTestTls(domain: string): TestTls {
  return makeTestTlsFor({ cn: `*.${domain}`, dns: [`*.${domain}`, domain, "localhost", "*.localhost"], ips: ["127.0.0.1"] });
}

/** The same for any names and IPv4 addresses (the certificate's subject alternative names; `cn` its common name). */
export function makeTestTlsFor(names: { cn: string; dns: string[]; ips: string[]; caName?: string }): TestTls {
  const dir = mkdtempSync(join(tmpdir(), "slotpool-tls-"));
  const f = (name: string) => join(dir, name);
  const openssl = (...args: string[]) => execFileSync("openssl", args, { stdio: ["ignore", "ignore", "pipe"] });
  openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", f("ca.key"), "-out", f("ca.pem"), "-days", "2", "-subj", `/CN=${names.caName ?? "slotpool test CA"}`, "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign");
  openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f("server.key"), "-out", f("server.csr"), "-subj", `/CN=${names.cn}`);
  const san = [...names.dns.map((d) => `DNS:${d}`), ...names.ips.map((i) => `IP:${i}`)].join(",");
  writeFileSync(f("ext.cnf"), `subjectAltName=${san}\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n`);
  openssl("x509", "-req", "-in", f("server.csr"), "-CA", f("ca.pem"), "-CAkey", f("ca.key"), "-CAcreateserial", "-out", f("server.pem"), "-days", "2", "-extfile", f("ext.cnf"));
  return {
    dir,
    caFile: f("ca.pem"),
    certFile: f("server.pem"),
    keyFile: f("server.key"),
    ca: readFileSync(f("ca.pem")),
    cert: readFileSync(f("server.pem")),
    key: readFileSync(f("server.key")),
    remove: () => rmSync(dir, { recursive: true, force: true }),
  };
}
