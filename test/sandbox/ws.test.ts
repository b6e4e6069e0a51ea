import { afterAll, beforeAll, describe, expect, it } from "vitest";
import WebSocket from "ws";
import { startServer, type TestServer } from "./helpers.js";

/** WebSocket route (issue 2 point 11): streamed output, read-only terminal attach. */
interface Msg {
  type: string;
  [k: string]: any;
}

function open(url: string, headers: Record<string, string> = {}): Promise<WebSocket> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url, { headers });
    ws.once("open", () => resolve(ws));
    ws.once("error", reject);
    ws.once("unexpected-response", (_req, res) => reject(new Error(`HTTP ${res.statusCode}`)));
  });
}

function collect(ws: WebSocket, until: (m: Msg, all: Msg[]) => boolean, timeoutMs = 15_000): Promise<Array<Msg & { at: number }>> {
  return new Promise((resolve, reject) => {
    const all: Array<Msg & { at: number }> = [];
    const timer = setTimeout(() => reject(new Error(`timed out; got ${JSON.stringify(all)}`)), timeoutMs);
    const done = () => {
      clearTimeout(timer);
      resolve(all);
    };
    ws.on("message", (raw) => {
      const m = { ...(JSON.parse(String(raw)) as Msg), at: Date.now() };
      all.push(m);
      if (until(m, all)) done();
    });
    ws.on("close", done);
  });
}

describe("WebSocket route", () => {
  let s: TestServer;
  const token = "ws-token-1";
  let wsUrl = "";
  beforeAll(async () => {
    s = await startServer({ slots: 2, token, extraArgs: ["--slot-uid-base", "21600"] });
    wsUrl = s.url.replace("http:", "ws:") + "/ws";
  });
  afterAll(async () => {
    await s?.stop();
  });

  it("refuses a connection without or with a wrong token", async () => {
    await expect(open(wsUrl)).rejects.toThrow(/401/);
    await expect(open(wsUrl, { authorization: "Bearer nope" })).rejects.toThrow(/403/);
    const ok = await open(`${wsUrl}?token=${token}`);
    ok.close();
  });

  it("streams a long command's output as it is produced, then the result", async () => {
    const ws = await open(wsUrl, { authorization: `Bearer ${token}` });
    const started = Date.now();
    ws.send(JSON.stringify({ type: "execute", slot_id: "slot_0", tool: "bash", args: { command: "echo one; sleep 0.8; echo two >&2; sleep 0.8; echo three" }, execution_id: "w1" }));
    const msgs = await collect(ws, (m) => m.type === "result");
    const outputs = msgs.filter((m) => m.type === "output");
    expect(outputs.map((m) => m.data).join("")).toContain("one");
    const first = outputs.find((m) => m.data.includes("one"))!;
    // "one" arrived long before the command ended (1.6 s of sleeps follow it), measured
    // against the result's arrival so a slow start of the namespace cannot fail it.
    const ended = msgs.find((m) => m.type === "result")!.at;
    expect(ended - first.at).toBeGreaterThan(1_000);
    expect(ended - started).toBeGreaterThanOrEqual(1_600);
    expect(outputs.find((m) => m.data.includes("two"))!.stream).toBe("stderr");
    const result = msgs.find((m) => m.type === "result")!;
    expect(result).toMatchObject({ success: true, output: "one\nthree\n\n[stderr]\ntwo", execution_id: "w1" });
  });

  it("answers a malformed execute with an error naming the field", async () => {
    const ws = await open(wsUrl, { authorization: `Bearer ${token}` });
    ws.send(JSON.stringify({ type: "execute", slot_id: "slot_0", tool: "bash", args: {} }));
    const msgs = await collect(ws, (m) => m.type === "error");
    expect(msgs[0]).toMatchObject({ type: "error", field: "args.command" });
  });

  it("attaches read-only to a slot's terminal: current screen, then live output", async () => {
    await s.post("/execute", { slot_id: "slot_1", tool: "bash_stateful", args: { command: "echo before-attach" } });
    await s.post("/execute", { slot_id: "slot_1", tool: "tmux", args: { action: "send_keys", keys: "echo visible-line" } });
    // Wait until the terminal shows it (the shell may be slow on a busy machine).
    for (let i = 0; i < 50; i++) {
      const cap = await s.post("/execute", { slot_id: "slot_1", tool: "tmux", args: { action: "capture" } });
      if (/^visible-line$/m.test(cap.json.output)) break;
      await new Promise((r) => setTimeout(r, 100));
    }
    const ws = await open(wsUrl, { authorization: `Bearer ${token}` });
    ws.send(JSON.stringify({ type: "attach", slot_id: "slot_1" }));
    const screen = await collect(ws, (m) => m.type === "screen");
    expect(screen.find((m) => m.type === "screen")!.data, JSON.stringify(screen)).toContain("visible-line");
    // Input from the attached client is ignored.
    ws.send("echo injected\n");
    const live = collect(ws, (_m, all) => all.map((x) => x.data ?? "").join("").includes("live-42"));
    await s.post("/execute", { slot_id: "slot_1", tool: "tmux", args: { action: "send_keys", keys: "echo live-$((6*7))" } });
    await live;
    ws.close();
    const cap = await s.post("/execute", { slot_id: "slot_1", tool: "tmux", args: { action: "capture" } });
    expect(cap.json.output).not.toContain("injected");
  });

  it("says so when the slot has no terminal session", async () => {
    const ws = await open(wsUrl, { authorization: `Bearer ${token}` });
    ws.send(JSON.stringify({ type: "attach", slot_id: "slot_0" }));
    const msgs = await collect(ws, (m) => m.type === "error");
    expect(msgs[0]!.error).toMatch(/no terminal session/);
  });
});
