/**
 * A WebSocket client at the byte level, for what a real client library will not do: start a
 * large frame and stall halfway through it (the way a hostile client holds server memory).
 */
import { randomBytes } from "node:crypto";
import { connect, type Socket } from "node:net";

export interface RawWs {
  socket: Socket;
  /** Text frames the server sent, in order. */
  texts: string[];
  /** The close code the server sent, once it did. */
  closeCode: number | undefined;
  /** Resolves when the TCP connection ends. */
  ended: Promise<void>;
  /** Starts one masked text frame of `total` bytes and sends its first `sent` bytes (of spaces). */
  startFrame(total: number, sent: number): void;
}

/** The handshake's answer line (e.g. "HTTP/1.1 101 Switching Protocols"), and the open socket when it was 101. */
export async function rawWs(url: string): Promise<{ status: string; ws?: RawWs; body: string }> {
  const u = new URL(url);
  const socket = connect(Number(u.port), u.hostname);
  await new Promise<void>((resolve, reject) => {
    socket.once("connect", resolve);
    socket.once("error", reject);
  });
  socket.write(`GET ${u.pathname}${u.search} HTTP/1.1\r\nHost: ${u.host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: ${randomBytes(16).toString("base64")}\r\nSec-WebSocket-Version: 13\r\n\r\n`);
  let buf = Buffer.alloc(0);
  const head = await new Promise<string>((resolve, reject) => {
    const onData = (c: Buffer) => {
      buf = Buffer.concat([buf, c]);
      const end = buf.indexOf("\r\n\r\n");
      if (end < 0) return;
      socket.off("data", onData);
      const text = buf.subarray(0, end).toString();
      buf = buf.subarray(end + 4);
      resolve(text);
    };
    socket.on("data", onData);
    socket.once("error", reject);
    socket.once("end", () => resolve(buf.toString()));
  });
  const status = head.split("\r\n")[0] ?? "";
  if (!status.includes(" 101 ")) {
    socket.destroy();
    return { status, body: buf.toString() };
  }
  const ws: RawWs = {
    socket,
    texts: [],
    closeCode: undefined,
    ended: new Promise<void>((resolve) => socket.once("close", () => resolve())),
    startFrame(total, sent) {
      const header = Buffer.alloc(14);
      header[0] = 0x81; // FIN, text
      header[1] = 0x80 | 127; // masked, 64-bit length
      header.writeBigUInt64BE(BigInt(total), 2);
      // mask key 0: the payload goes as it is
      socket.write(header);
      socket.write(Buffer.alloc(sent, 0x20));
    },
  };
  const parse = () => {
    while (buf.length >= 2) {
      const op = buf[0]! & 0x0f;
      let len = buf[1]! & 0x7f;
      let at = 2;
      if (len === 126) {
        if (buf.length < 4) return;
        len = buf.readUInt16BE(2);
        at = 4;
      } else if (len === 127) {
        if (buf.length < 10) return;
        len = Number(buf.readBigUInt64BE(2));
        at = 10;
      }
      if (buf.length < at + len) return;
      const payload = buf.subarray(at, at + len);
      buf = buf.subarray(at + len);
      if (op === 1) ws.texts.push(payload.toString());
      if (op === 8) ws.closeCode = payload.length >= 2 ? payload.readUInt16BE(0) : 1005;
    }
  };
  socket.on("data", (c: Buffer) => {
    buf = Buffer.concat([buf, c]);
    parse();
  });
  socket.on("error", () => undefined);
  parse();
  return { status, ws, body: "" };
}
