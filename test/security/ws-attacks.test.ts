/**
 * The sandbox server's WebSocket route (`/ws`): auth on the upgrade (header and ?token=),
 * read-only terminal attach, bad first messages, and an escape attempt through the attach:
 * a slot takes over its own terminal socket with a fake tmux server, so whatever tmux client
 * attaches is told to exec a command. That client must run inside the slot's sandbox.
 */
import { randomBytes } from "node:crypto";
import { existsSync, readFileSync, rmSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import WebSocket from "ws";
import { eventually, rssKb, startAttackServer, within, type AttackServer } from "./support.js";
import { serverView } from "../support/server-view.js";

let server: AttackServer;
const hostMarkers: string[] = [];

beforeAll(async () => {
  server = await startAttackServer({ slots: 2, env: { SLOTPOOL_LOG_LEVEL: "debug" } });
  expect((await server.health()).json.bwrap_available).toBe(true);
}, 60_000);
afterAll(async () => {
  for (const m of hostMarkers) rmSync(m, { force: true });
  await server?.stop();
});

function stateful(slot: number, command: string) {
  return server.execute({ slot_id: `slot_${slot}`, tool: "bash_stateful", args: { command, require_sandbox: true, allow_network: false } });
}

function wsUrl(query = ""): string {
  return `${server.url.replace(/^http/, "ws")}/ws${query}`;
}

/** Opens a socket; resolves with it once open, or with the HTTP status the upgrade got. */
function open(url: string, headers: Record<string, string> = {}): Promise<WebSocket | number> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url, { headers });
    ws.once("open", () => resolve(ws));
    ws.once("unexpected-response", (_req, res) => resolve(res.statusCode ?? 0));
    ws.once("error", reject);
  });
}

function messages(ws: WebSocket): { list: Array<Record<string, unknown>>; closed: Promise<number> } {
  const list: Array<Record<string, unknown>> = [];
  ws.on("message", (m) => list.push(JSON.parse(String(m)) as Record<string, unknown>));
  const closed = new Promise<number>((r) => ws.once("close", (code) => r(code)));
  return { list, closed };
}

describe("WebSocket auth", () => {
  it("the upgrade needs the token: none → 401, wrong header → 403, wrong ?token= → 403; the right ones open", async () => {
    expect(await open(wsUrl())).toBe(401);
    expect(await open(wsUrl(), { authorization: "Bearer wrong" })).toBe(403);
    expect(await open(wsUrl("?token=wrong"))).toBe(403);
    const byHeader = await open(wsUrl(), { authorization: `Bearer ${server.token}` });
    expect(byHeader).toBeInstanceOf(WebSocket);
    (byHeader as WebSocket).close();
    const byQuery = await open(wsUrl(`?token=${server.token}`));
    expect(byQuery).toBeInstanceOf(WebSocket);
    (byQuery as WebSocket).close();
    // A token in the query string must not reach the logs either.
    // wait: the server's log lines about the two connections reaching the test through its stderr pipe
    await new Promise((r) => setTimeout(r, 200));
    expect(server.logs.join("\n")).not.toContain(server.token);
  });

  it("a first message that is not JSON, or of no known type, gets an error and a close; the server stays up", async () => {
    for (const first of ["not json", JSON.stringify({ type: "shell" }), JSON.stringify({ type: "execute", slot_id: "slot_99", tool: "bash", args: { command: "true" } })]) {
      const ws = (await open(wsUrl(), { authorization: `Bearer ${server.token}` })) as WebSocket;
      const { list, closed } = messages(ws);
      ws.send(first);
      await within(20_000, "close after a bad first message", closed);
      expect(list[0]?.["type"]).toBe("error");
      expect(String(list[0]?.["error"]).length).toBeGreaterThan(5);
    }
    expect((await server.health()).status).toBe(200);
  });
});

describe("terminal attach", () => {
  it("is read-only: input sent after attaching never reaches the session", async () => {
    await server.reset(0);
    expect((await stateful(0, "echo attached-session")).output).toBe("attached-session");
    const ws = (await open(wsUrl(), { authorization: `Bearer ${server.token}` })) as WebSocket;
    const { list } = messages(ws);
    ws.send(JSON.stringify({ type: "attach", slot_id: "slot_0" }));
    expect(await eventually(() => list.some((m) => m["type"] === "screen"), 30_000)).toBe(true);
    for (const input of ["touch /workspace/pwned-by-ws\r", JSON.stringify({ type: "input", data: "touch /workspace/pwned-by-ws\n" }), JSON.stringify({ type: "keys", keys: "touch /workspace/pwned-by-ws", enter: true })]) ws.send(input);
    // wait: a window for the injected input to run, had it reached the terminal (a loaded box can only make it run later: a false pass, never a false failure)
    await new Promise((r) => setTimeout(r, 1_000));
    ws.close();
    expect(existsSync(serverView(server.proc.pid, join(server.dataDir, "slot_0", "pwned-by-ws")))).toBe(false);
    const cap = await server.execute({ slot_id: "slot_0", tool: "tmux", args: { action: "capture", allow_network: false } });
    expect(cap.output).not.toContain("pwned-by-ws");
    await server.reset(0);
  }, 30_000);

  it("a slot that replaces its terminal socket with a fake tmux server cannot run anything outside its sandbox when someone attaches", async () => {
    await server.reset(0);
    const marker = `/tmp/slotpool-ws-escape-${process.pid}-${randomBytes(3).toString("hex")}`;
    hostMarkers.push(marker);
    const fake = readFileSync(fileURLToPath(new URL("./fixtures/fake-tmux-server.py", import.meta.url)), "utf8");
    expect((await server.tool(0, "write_file", { path: "fake.py", content: fake })).success).toBe(true);
    // Payload: records who and where it ran. Inside the sandbox /tmp is private, so the host
    // file appears only if the attach's tmux client ran on the host.
    const planted = await stateful(0, `nohup python3 /workspace/fake.py /tmp/.slotpool/tmux.sock 'id > ${marker}; hostname >> ${marker}' > /workspace/fake.log 2>&1 & echo planted`);
    expect(planted.output).toBe("planted");
    // wait: the fake takes the socket over after its own 2 s
    await new Promise((r) => setTimeout(r, 3_000));
    const ws = (await open(wsUrl(), { authorization: `Bearer ${server.token}` })) as WebSocket;
    messages(ws);
    ws.send(JSON.stringify({ type: "attach", slot_id: "slot_0" }));
    // wait: the attach's tmux client talking to the fake (its exchange is what the log below shows)
    await new Promise((r) => setTimeout(r, 3_000));
    ws.close();
    const log = readFileSync(serverView(server.proc.pid, join(server.dataDir, "slot_0", "fake.log")), "utf8");
    // Control: the fake took the socket over, a client connected, got MSG_EXEC and agreed to
    // exit for it (MSG_EXITING = 205): the attack was delivered; only where it ran is in question.
    expect(log).toContain("listening");
    expect(log, log).toContain("sent exec");
    expect(log, log).toMatch(/client msg 205\b/);
    const escaped = existsSync(marker) ? readFileSync(marker, "utf8") : "";
    expect(escaped, `a command of slot_0 ran on the host through the WebSocket attach:\n${escaped}`).toBe("");
    await server.reset(0);
  }, 45_000);
});

describe("streamed execute", () => {
  it("a client that stops reading a streamed `yes` does not make the server buffer without bound", async () => {
    const ws = (await open(wsUrl(), { authorization: `Bearer ${server.token}` })) as WebSocket;
    const before = Math.round(rssKb(server.proc.pid) / 1024);
    ws.send(JSON.stringify({ type: "execute", slot_id: "slot_1", tool: "bash", args: { command: "yes slotpool-ws-flood", require_sandbox: true }, timeout: 5 }));
    // wait: the command starting to stream before the client stops reading
    await new Promise((r) => setTimeout(r, 200));
    // Stop reading: the kernel buffers fill, then everything piles up in the server.
    (ws as unknown as { _socket: { pause(): void } })._socket.pause();
    let peak = before;
    for (let i = 0; i < 30; i++) {
      await new Promise((r) => setTimeout(r, 200));
      peak = Math.max(peak, Math.round(rssKb(server.proc.pid) / 1024));
    }
    ws.terminate();
    console.log(`paused WebSocket reader of \`yes\` for 5 s: server RSS ${before} MB → peak ${peak} MB`);
    expect((await server.health()).status).toBe(200);
    expect(peak, `server RSS grew to ${peak} MB behind a client that does not read`).toBeLessThan(before + 150);
  }, 30_000);
});

