// The hosts of the fake internet (fake-internet.ts), run inside its own network namespace:
// `node --import tsx fake-internet-hosts.ts CONFIG_JSON`. It answers what E2B's tests curl
// the way the real hosts do (the answers E2B's tests assert): Cloudflare's 1.1.1.1 a 301 to
// its site, Google's 8.8.8.8 a 302 to its site, connectivitycheck.gstatic.com/generate_204 an
// empty 204, over HTTPS (a certificate of the test's CA) and plain HTTP; and DNS (UDP) on the
// resolver address for the names it holds. Prints "up" once every socket listens; ends when
// its stdin closes (the test that started it is gone, however it ended).
import { createSocket } from "node:dgram";
import { readFileSync } from "node:fs";
import { createServer as createHttp, type IncomingMessage, type ServerResponse } from "node:http";
import { createServer as createHttps } from "node:https";

export interface FakeHost {
  address: string;
  /** path → [status, headers]; any other path is a 404. */
  answers: Record<string, [number, Record<string, string>]>;
}

export interface FakeInternetConfig {
  certFile: string;
  keyFile: string;
  hosts: FakeHost[];
  /** The resolver's address (one of the hosts' or its own). */
  dns: string;
  /** name (lower case, no trailing dot) → IPv4 address. */
  names: Record<string, string>;
}

function handler(host: FakeHost) {
  return (req: IncomingMessage, res: ServerResponse) => {
    const path = (req.url ?? "/").split("?")[0]!;
    const answer = host.answers[path];
    if (!answer) {
      res.writeHead(404, { "content-type": "text/plain" }).end("not found\n");
      return;
    }
    const [status, headers] = answer;
    res.writeHead(status, { "content-length": "0", ...headers }).end();
  };
}

/** One DNS answer (RFC 1035): A records for the names held, an empty answer for their other types, NXDOMAIN for the rest. */
export function dnsAnswer(query: Buffer, names: Record<string, string>): Buffer | undefined {
  if (query.length < 12) return undefined;
  let at = 12;
  const labels: string[] = [];
  while (at < query.length && query[at] !== 0) {
    const len = query[at]!;
    if (len > 63) return undefined;
    labels.push(query.subarray(at + 1, at + 1 + len).toString("latin1"));
    at += len + 1;
  }
  const qtype = query.readUInt16BE(at + 1);
  const questionEnd = at + 5;
  if (questionEnd > query.length) return undefined;
  const name = labels.join(".").toLowerCase();
  const address = names[name];
  const header = Buffer.alloc(12);
  query.copy(header, 0, 0, 2); // id
  const rd = query[2]! & 1;
  header[2] = 0x84 | rd; // response, authoritative, recursion desired as asked
  header[3] = 0x80 | (address === undefined ? 3 : 0); // recursion available; NXDOMAIN or not
  header.writeUInt16BE(1, 4);
  const answers = address !== undefined && qtype === 1 ? 1 : 0;
  header.writeUInt16BE(answers, 6);
  const question = query.subarray(12, questionEnd);
  if (answers === 0) return Buffer.concat([header, question]);
  const record = Buffer.alloc(16);
  record.writeUInt16BE(0xc00c, 0); // the name, by pointer to the question's
  record.writeUInt16BE(1, 2); // A
  record.writeUInt16BE(1, 4); // IN
  record.writeUInt32BE(300, 6); // TTL
  record.writeUInt16BE(4, 10);
  address!.split(".").forEach((o, i) => (record[12 + i] = Number(o)));
  return Buffer.concat([header, question, record]);
}

async function main(config: FakeInternetConfig): Promise<void> {
  const tls = { cert: readFileSync(config.certFile), key: readFileSync(config.keyFile) };
  const listening: Promise<void>[] = [];
  for (const host of config.hosts) {
    for (const [server, port] of [[createHttps(tls, handler(host)), 443], [createHttp(handler(host)), 80]] as const) {
      listening.push(new Promise((resolve) => server.listen(port, host.address, () => resolve())));
    }
  }
  const udp = createSocket("udp4");
  udp.on("message", (msg, from) => {
    const reply = dnsAnswer(msg, config.names);
    if (reply) udp.send(reply, from.port, from.address);
  });
  listening.push(new Promise((resolve) => udp.bind(53, config.dns, () => resolve())));
  await Promise.all(listening);
  process.stdin.on("end", () => process.exit(0));
  process.stdin.resume();
  process.stdout.write("up\n");
}

if (process.argv[2]) {
  main(JSON.parse(process.argv[2]) as FakeInternetConfig).catch((e: unknown) => {
    process.stderr.write(`fake internet: ${e instanceof Error ? e.message : String(e)}\n`);
    process.exit(1);
  });
}
