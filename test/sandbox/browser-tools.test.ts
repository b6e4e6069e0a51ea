import { createServer, type Server } from "node:net";
import { networkInterfaces } from "node:os";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startServer, type TestServer } from "./helpers.js";
import { BROWSER_TEST, browserProcesses, chromium, refIn, serveSite, tool } from "./browser-helpers.js";
import { readFileSync } from "node:fs";

/**
 * The seed's browser tools on a real sandbox server with Debian's Chromium: each tool, refs
 * across snapshots, and the errors a model reads (issue 40). The app the browser visits is
 * served by the slot's own terminal on the slot's 127.0.0.1, as a task's setup serves it.
 */

const PORT = 18_000 + Math.floor(Math.random() * 1000);
const SITE = `http://127.0.0.1:${PORT}`;
/** A non-loopback IPv4 address of this host (eth0's), or undefined where there is none. */
const hostAddress = Object.values(networkInterfaces())
  .flat()
  .find((a) => a && a.family === "IPv4" && !a.internal)?.address;

describe.skipIf(!chromium)("browser tools (skipped without Chromium: scripts/setup.sh installs it)", BROWSER_TEST, () => {
  let s: TestServer;
  beforeAll(async () => {
    s = await startServer({ slots: 2, extraArgs: ["--no-network"] });
    await serveSite(s, 0, PORT);
  });
  afterAll(async () => {
    await s?.stop();
  });

  it("a tool other than browser_navigate before any page says to navigate first (a result the model reads, not an infra failure)", async () => {
    const r = await tool(s, 1, "browser_snapshot");
    expect(r.success).toBe(false);
    expect(r.error).toMatch(/no page is open.*browser_navigate first/);
    expect(r.metadata["browser_error"]).toBe("no_page");
    expect(r.metadata["infra"]).toBeUndefined();
  });

  it("browser_navigate starts the slot's browser, loads a page served in the slot, and answers its final url and title", async () => {
    const r = await tool(s, 0, "browser_navigate", { url: `${SITE}/` });
    expect(r.success, r.error).toBe(true);
    expect(r.metadata).toMatchObject({ url: `${SITE}/`, title: "Shop" });
    expect(r.output).toBe(`url: ${SITE}/\ntitle: Shop`);
  });

  it("browser_snapshot is compact by default (no bare wrappers), full on request, with @eN refs and the element count", async () => {
    await tool(s, 0, "browser_navigate", { url: `${SITE}/` });
    const compact = await tool(s, 0, "browser_snapshot");
    expect(compact.success, compact.error).toBe(true);
    expect(compact.output).toMatch(/^url: .*\ntitle: Shop\n/);
    expect(compact.output).toMatch(/- heading "Welcome" \[level=1\] \[ref=(f\d+)?e\d+\]/);
    expect(compact.output).toMatch(/- textbox "Name" \[ref=(f\d+)?e\d+\]/);
    expect(compact.output).toMatch(/- button "Send" \[ref=(f\d+)?e\d+\]/);
    expect(compact.output).toMatch(/- link "Second page" \[ref=(f\d+)?e\d+\]/);
    expect(compact.output).not.toMatch(/^\s*- generic \[[^\]]*\]:?$/m);
    const full = await tool(s, 0, "browser_snapshot", { full: true });
    expect(full.metadata["full"]).toBe(true);
    expect(full.output).toMatch(/- generic \[/);
    const refs = (t: string) => new Set(t.match(/\[ref=(f\d+)?e\d+\]/g));
    expect(compact.metadata["element_count"]).toBe(refs(compact.output).size);
    expect(full.metadata["element_count"]).toBe(refs(full.output).size);
    expect(refs(full.output).size).toBeGreaterThan(refs(compact.output).size);
  });

  it("an element keeps its ref across snapshots while it stays on the page, and an old snapshot's ref still works", async () => {
    await tool(s, 0, "browser_navigate", { url: `${SITE}/` });
    const first = (await tool(s, 0, "browser_snapshot")).output;
    const name = refIn(first, /textbox "Name"/);
    const send = refIn(first, /button "Send"/);
    // The page changes between snapshots: a new element before the form.
    expect((await tool(s, 0, "browser_click", { ref: refIn(first, /button "Add note"/) })).success).toBe(true);
    const second = (await tool(s, 0, "browser_snapshot", { full: true })).output;
    expect(second).toMatch(/paragraph \[ref=(f\d+)?e\d+\]: A note/);
    expect(refIn(second, /textbox "Name"/)).toBe(name);
    expect(refIn(second, /button "Send"/)).toBe(send);
    const typed = await tool(s, 0, "browser_type", { ref: name, text: "kept" });
    expect(typed.success, typed.error).toBe(true);
  });

  it("browser_type fills a field (the seed's @ref or a bare ref) and browser_click submits the form", async () => {
    await tool(s, 0, "browser_navigate", { url: `${SITE}/` });
    const snap = (await tool(s, 0, "browser_snapshot")).output;
    const typed = await tool(s, 0, "browser_type", { ref: refIn(snap, /textbox "Name"/).slice(1), text: "Ada" });
    expect(typed.success, typed.error).toBe(true);
    expect(typed.metadata).toMatchObject({ typed: "Ada", element: refIn(snap, /textbox "Name"/) });
    const clicked = await tool(s, 0, "browser_click", { ref: refIn(snap, /button "Send"/) });
    expect(clicked.success, clicked.error).toBe(true);
    expect(clicked.metadata["url"]).toBe(`${SITE}/done.html?name=Ada`);
    const after = await tool(s, 0, "browser_snapshot");
    expect(after.output).toMatch(/heading "Hello Ada"/);
  });

  it("browser_back goes back in the history and answers the url", async () => {
    await tool(s, 0, "browser_navigate", { url: `${SITE}/` });
    await tool(s, 0, "browser_navigate", { url: `${SITE}/page2.html` });
    const back = await tool(s, 0, "browser_back");
    expect(back.success, back.error).toBe(true);
    expect(back.metadata["url"]).toBe(`${SITE}/`);
    expect((await tool(s, 0, "browser_snapshot")).output).toMatch(/heading "Welcome"/);
  });

  it("browser_scroll moves the page down and up", async () => {
    await tool(s, 0, "browser_navigate", { url: `${SITE}/` });
    const down = await tool(s, 0, "browser_scroll", { direction: "down" });
    expect(down).toMatchObject({ success: true, metadata: { scrolled: "down" } });
    expect((await tool(s, 0, "browser_snapshot")).metadata["title"]).toBe("Shop scrolled down");
    await tool(s, 0, "browser_scroll", { direction: "up" });
    await tool(s, 0, "browser_scroll", { direction: "up" });
    expect((await tool(s, 0, "browser_snapshot")).metadata["title"]).toBe("Shop scrolled top");
  });

  it("browser_press sends a key to the page; a key that does not exist is an error naming it", async () => {
    await tool(s, 0, "browser_navigate", { url: `${SITE}/keys.html` });
    const pressed = await tool(s, 0, "browser_press", { key: "ArrowDown" });
    expect(pressed).toMatchObject({ success: true, metadata: { pressed: "ArrowDown" } });
    expect((await tool(s, 0, "browser_snapshot")).output).toMatch(/got key ArrowDown/);
    const bad = await tool(s, 0, "browser_press", { key: "NoSuchKey" });
    expect(bad.success).toBe(false);
    expect(bad.error).toMatch(/could not press "NoSuchKey"/);
    expect(bad.metadata["infra"]).toBeUndefined();
  });

  it("browser_get_images lists the page's images as the seed does: src, alt, natural width and height", async () => {
    await tool(s, 0, "browser_navigate", { url: `${SITE}/` });
    const r = await tool(s, 0, "browser_get_images");
    expect(r.success, r.error).toBe(true);
    expect(r.metadata).toMatchObject({ count: 1, images: [{ src: `${SITE}/logo.png`, alt: "Logo", width: 2, height: 1 }] });
    expect(JSON.parse(r.output)).toEqual(r.metadata["images"]);
  });

  it("browser_vision answers with a screenshot of the page for the executor's vision model (a JPEG data URL) and the question", async () => {
    await tool(s, 0, "browser_navigate", { url: `${SITE}/` });
    const r = await tool(s, 0, "browser_vision", { question: "What is the heading?" });
    expect(r.success, r.error).toBe(true);
    expect(r.metadata["question"]).toBe("What is the heading?");
    const shot = String(r.metadata["screenshot"]);
    expect(shot).toMatch(/^data:image\/jpeg;base64,/);
    const jpeg = Buffer.from(shot.slice(shot.indexOf(",") + 1), "base64");
    expect(jpeg.subarray(0, 3)).toEqual(Buffer.from([0xff, 0xd8, 0xff]));
  });

  it("a stale or unknown ref is an error that says to take a new snapshot", async () => {
    await tool(s, 0, "browser_navigate", { url: `${SITE}/` });
    const old = refIn((await tool(s, 0, "browser_snapshot")).output, /link "Second page"/);
    await tool(s, 0, "browser_navigate", { url: `${SITE}/page2.html` });
    await tool(s, 0, "browser_snapshot");
    const r = await tool(s, 0, "browser_click", { ref: old });
    expect(r.success).toBe(false);
    expect(r.metadata["browser_error"]).toBe("stale_ref");
    expect(r.error).toMatch(/take a new browser_snapshot/);
    const unknown = await tool(s, 0, "browser_click", { ref: "@e9999" });
    expect(unknown.metadata["browser_error"]).toBe("stale_ref");
  });

  it("a ref that is no ref at all (a selector, a label) is refused before anything runs, naming the argument", async () => {
    const r = await s.post("/execute", { slot_id: "slot_0", tool: "browser_click", args: { ref: "button.submit" } });
    expect(r.status).toBe(400);
    expect(r.json.field).toBe("args.ref");
    expect(r.json.error).toMatch(/ref must be an element ref from browser_snapshot, such as @e5/);
  });

  it("a navigation that fails (nothing listens) or does not load in time is an error the model reads, not an infra failure", async () => {
    const refused = await tool(s, 0, "browser_navigate", { url: `http://127.0.0.1:${PORT + 1}/` });
    expect(refused.success).toBe(false);
    expect(refused.metadata["browser_error"]).toBe("navigation");
    expect(refused.error).toMatch(/ERR_CONNECTION_REFUSED/);
    expect(refused.metadata["infra"]).toBeUndefined();
    // A server in the slot that accepts and never answers.
    const hang = await tool(s, 0, "bash_stateful", {
      command: `python3 -c 'import socket,time; s=socket.socket(); s.bind(("127.0.0.1", ${PORT + 2})); s.listen(8); time.sleep(600)' >/dev/null 2>&1 &
for i in $(seq 300); do (exec 3<>/dev/tcp/127.0.0.1/${PORT + 2}) 2>/dev/null && exit 0; sleep 0.1; done; exit 1`,
    });
    expect(hang.success, hang.error).toBe(true);
    const slow = await tool(s, 0, "browser_navigate", { url: `http://127.0.0.1:${PORT + 2}/` }, { timeout: 2 });
    expect(slow.success).toBe(false);
    expect(slow.metadata["browser_error"]).toBe("timeout");
    expect(slow.error).toMatch(/timed out after 2 s/);
    expect(slow.metadata["infra"]).toBeUndefined();
    // The browser is still there for the next call.
    expect((await tool(s, 0, "browser_navigate", { url: `${SITE}/page2.html` })).success).toBe(true);
  });

  it("a URL without a scheme is taken as http (as a person types it), and file:// reaches the slot's workspace", async () => {
    const bare = await tool(s, 0, "browser_navigate", { url: `127.0.0.1:${PORT}/page2.html` });
    expect(bare.metadata).toMatchObject({ url: `${SITE}/page2.html`, title: "Second" });
    const file = await tool(s, 0, "browser_navigate", { url: "file:///workspace/site/page2.html" });
    expect(file.metadata).toMatchObject({ url: "file:///workspace/site/page2.html", title: "Second" });
  });

  it("browser_close ends the browser (the next tool says to navigate); the next navigate starts a new one", async () => {
    await tool(s, 0, "browser_navigate", { url: `${SITE}/` });
    const closed = await tool(s, 0, "browser_close");
    expect(closed).toMatchObject({ success: true, output: "browser closed", metadata: { closed: true } });
    const after = await tool(s, 0, "browser_snapshot");
    expect(after.metadata["browser_error"]).toBe("no_page");
    const again = await tool(s, 0, "browser_close");
    expect(again).toMatchObject({ success: true, metadata: { closed: true, warning: "no browser session was active" } });
    expect((await tool(s, 0, "browser_navigate", { url: `${SITE}/` })).success).toBe(true);
  });
});

describe.skipIf(!chromium)("a browser with the network off (skipped without Chromium)", BROWSER_TEST, () => {
  let s: TestServer;
  let listener: Server;
  let connections = 0;
  let port = 0;

  beforeAll(async () => {
    s = await startServer({ slots: 1, extraArgs: ["--no-network"] });
    // A listener on the host, on every address: nothing of a slot may ever reach it.
    listener = createServer((c) => {
      connections++;
      c.end("HTTP/1.1 200 OK\r\ncontent-length: 4\r\n\r\nhost");
    });
    await new Promise<void>((r) => listener.listen(0, "0.0.0.0", r));
    port = (listener.address() as { port: number }).port;
  });
  afterAll(async () => {
    listener?.close();
    await s?.stop();
  });

  it("the host's loopback is not the browser's: 127.0.0.1 is the slot's own, where nothing listens on the host's port", async () => {
    const r = await tool(s, 0, "browser_navigate", { url: `http://127.0.0.1:${port}/` });
    expect(r.success).toBe(false);
    expect(r.error).toMatch(/ERR_CONNECTION_REFUSED/);
    expect(connections).toBe(0);
  });

  it.skipIf(!hostAddress)("a host address is unreachable too (skipped on a host without a non-loopback IPv4 address)", async () => {
    const r = await tool(s, 0, "browser_navigate", { url: `http://${hostAddress}:${port}/` }, { timeout: 10 });
    expect(r.success).toBe(false);
    expect(r.error).toMatch(/ERR_(ADDRESS_UNREACHABLE|NETWORK_UNREACHABLE|INTERNET_DISCONNECTED|CONNECTION_REFUSED|NAME_NOT_RESOLVED)/);
    expect(connections).toBe(0);
  });
});

describe.skipIf(!chromium)("a browser with the network on (skipped without Chromium)", BROWSER_TEST, () => {
  let s: TestServer;
  let listener: Server;
  let connections = 0;
  let port = 0;
  let internet = false;

  beforeAll(async () => {
    s = await startServer({ slots: 1 });
    internet = s.logs.some((l) => l.includes('"msg":"listening"') && l.includes('"internet":"slirp4netns"'));
    listener = createServer((c) => {
      connections++;
      c.end("HTTP/1.1 200 OK\r\ncontent-length: 4\r\n\r\nhost");
    });
    await new Promise<void>((r) => listener.listen(0, "0.0.0.0", r));
    port = (listener.address() as { port: number }).port;
  });
  afterAll(async () => {
    listener?.close();
    await s?.stop();
  });

  it("is the slot's own link (slirp4netns), which reaches neither the host's loopback nor its addresses (skipped where the server offers no network on)", async (ctx) => {
    if (!internet) ctx.skip();
    const opened = await tool(s, 0, "browser_navigate", { url: "data:text/html,<title>on</title>", allow_network: true });
    expect(opened.success, opened.error).toBe(true);
    // The browser's network namespace has the slot's tap device: the network is on.
    expect(readFileSync(`/proc/${browserProcesses(s, 0)[0]}/net/dev`, "utf8")).toMatch(/tap0:/);
    // 10.0.2.2 is slirp's way to the host's loopback (turned off); the host's own address is routed nowhere.
    for (const host of ["10.0.2.2", ...(hostAddress ? [hostAddress] : [])]) {
      const r = await tool(s, 0, "browser_navigate", { url: `http://${host}:${port}/`, allow_network: true }, { timeout: 10 });
      expect(r.success, `${host}: ${r.output}`).toBe(false);
      expect(r.metadata["infra"]).toBeUndefined();
    }
    expect(connections).toBe(0);
  });
});
