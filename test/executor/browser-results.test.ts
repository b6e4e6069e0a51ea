import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ToolExecutor } from "../../src/executor/tool-executor.js";
import { ExecutorServer } from "../../src/executor/executor-server.js";
import { LocalProvisioner } from "../../src/pool/local-provisioner.js";
import { SlotPool } from "../../src/pool/slot-pool.js";
import { BROWSER_TEST, chromium } from "../sandbox/browser-helpers.js";
import { startLlmServer, type LlmServer } from "../support/llm-server.js";

/**
 * What the executor adds to the browser tools' answers (issue 40): the env's bound on a
 * snapshot, and browser_vision's screenshot handed to the env's vision model (OpenAI-compatible
 * chat completions with an image content part), or a clear "no vision model configured".
 */

const LIST_PAGE = `data:text/html,<title>List</title><ul>${Array.from({ length: 100 }, (_, i) => `<li>item number ${i}</li>`).join("")}</ul>`;
const HEADING_PAGE = "data:text/html,<title>Vision</title><h1 style='font-size:80px'>Big red heading</h1>";

describe.skipIf(!chromium)("the executor and the browser tools (skipped without Chromium)", BROWSER_TEST, () => {
  let provisioner: LocalProvisioner;
  let pool: SlotPool;
  let withVision: ToolExecutor;
  let noVision: ToolExecutor;
  let brokenVision: ToolExecutor;
  let llm: LlmServer;
  let failing: LlmServer;

  beforeAll(async () => {
    llm = await startLlmServer({ respond: () => ({ text: "The page shows a big red heading." }) });
    failing = await startLlmServer({ respond: () => ({ status: 500, body: "vision backend down" }) });
    provisioner = new LocalProvisioner({ slotsPerContainer: 3 });
    pool = new SlotPool({ provisioner, slotsPerContainer: 3, minContainers: 1, maxContainers: 1, acquireTimeoutMs: 30_000, healthIntervalMs: 1000 });
    await pool.start();
    withVision = new ToolExecutor({ pool, config: { browser: { snapshotMaxChars: 400, vision: { url: llm.url, name: "vision-test" } } } });
    noVision = new ToolExecutor({ pool });
    brokenVision = new ToolExecutor({ pool, config: { browser: { vision: { url: failing.url, name: "vision-down", timeoutMs: 30_000 } } } });
    await Promise.all([withVision.start(), noVision.start(), brokenVision.start()]);
  });
  afterAll(async () => {
    await Promise.all([withVision?.close(), noVision?.close(), brokenVision?.close()]);
    await pool?.stop();
    await Promise.all([llm?.close(), failing?.close()]);
  });

  it("a snapshot over the env's snapshotMaxChars reaches the model cut, with the seed's note and metadata.truncated", async () => {
    expect((await withVision.execute("long", { name: "browser_navigate", arguments: { url: LIST_PAGE } })).success).toBe(true);
    const r = await withVision.execute("long", { name: "browser_snapshot", arguments: { full: true } });
    expect(r.success, r.error).toBe(true);
    expect(r.output.length).toBeLessThanOrEqual(400 + "\n\n[... content truncated ...]".length);
    expect(r.output.endsWith("\n\n[... content truncated ...]")).toBe(true);
    expect(r.metadata).toMatchObject({ truncated: true });
    expect(r.metadata["snapshot_chars"]).toBeGreaterThan(400);
    // The default bound (8000, the seed's) keeps this page whole.
    await noVision.execute("whole", { name: "browser_navigate", arguments: { url: LIST_PAGE } });
    const whole = await noVision.execute("whole", { name: "browser_snapshot", arguments: { full: true } });
    expect(whole.metadata["truncated"]).toBeUndefined();
    expect(whole.output).toMatch(/item number 99/);
    await Promise.all([withVision.release("long"), noVision.release("whole")]);
  });

  it("browser_vision hands the screenshot and the question to the env's vision model and answers with its analysis; the image never reaches the transcript", async () => {
    await withVision.execute("vision", { name: "browser_navigate", arguments: { url: HEADING_PAGE } });
    const before = llm.requests.length;
    const r = await withVision.execute("vision", { name: "browser_vision", arguments: { question: "What colour is the heading?" } });
    expect(r.success, r.error).toBe(true);
    expect(r.output).toBe("The page shows a big red heading.");
    expect(r.metadata).toMatchObject({ analysis: "The page shows a big red heading.", vision_model: "vision-test", question: "What colour is the heading?", title: "Vision" });
    expect(r.metadata["screenshot"]).toBeUndefined();
    expect(JSON.stringify(r)).not.toMatch(/base64/);
    expect(llm.requests.length).toBe(before + 1);
    const req = llm.requests[before]! as unknown as { model: string; messages: Array<{ role: string; content: Array<{ type: string; text?: string; image_url?: { url: string } }> }> };
    expect(req.model).toBe("vision-test");
    const parts = req.messages[0]!.content;
    expect(parts[0]).toMatchObject({ type: "text" });
    expect(parts[0]!.text).toMatch(/User's question: What colour is the heading\?/);
    expect(parts[1]!.type).toBe("image_url");
    const jpeg = Buffer.from(parts[1]!.image_url!.url.replace(/^data:image\/jpeg;base64,/, ""), "base64");
    expect(jpeg.subarray(0, 3)).toEqual(Buffer.from([0xff, 0xd8, 0xff]));
    await withVision.release("vision");
  });

  it("without a vision model, browser_vision is a failed result saying none is configured (the agent's to read, not an infra failure)", async () => {
    await noVision.execute("blind", { name: "browser_navigate", arguments: { url: HEADING_PAGE } });
    const r = await noVision.execute("blind", { name: "browser_vision", arguments: { question: "What is it?" } });
    expect(r.success).toBe(false);
    expect(r.error).toMatch(/^no vision model configured: browser_vision needs the env's executor\.browser\.vision/);
    expect(r.metadata).toMatchObject({ browser_error: "no_vision_model" });
    expect(r.metadata["infra"]).toBeUndefined();
    expect(r.metadata["screenshot"]).toBeUndefined();
    await noVision.release("blind");
  });

  it("a vision model that fails is the infrastructure's (vision_model), never the agent's error", async () => {
    await brokenVision.execute("broken", { name: "browser_navigate", arguments: { url: HEADING_PAGE } });
    const r = await brokenVision.execute("broken", { name: "browser_vision", arguments: { question: "What is it?" } });
    expect(r.success).toBe(false);
    expect(r.metadata["infra"]).toBe("vision_model");
    expect(r.error).toMatch(/vision-down could not analyse the screenshot: HTTP 500: vision backend down/);
    expect(r.metadata["screenshot"]).toBeUndefined();
    await brokenVision.release("broken");
  });

  it("the executor's HTTP service (the seed's Python clients' route) runs the browser tools by trajectory id", async () => {
    const server = new ExecutorServer({ executor: noVision, pool });
    const url = await server.listen(0, "127.0.0.1");
    try {
      const post = async (tool: string, args: Record<string, unknown>) =>
        (await (await fetch(`${url}/execute`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ trajectory_id: "http", tool: { name: tool, arguments: args } }) })).json()) as { success: boolean; output: string; metadata: Record<string, unknown> };
      expect(await post("browser_navigate", { url: HEADING_PAGE })).toMatchObject({ success: true, metadata: { title: "Vision" } });
      expect((await post("browser_snapshot", {})).output).toMatch(/heading "Big red heading"/);
      await fetch(`${url}/release`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ trajectory_id: "http", reset_workspace: true }) });
    } finally {
      await server.close();
    }
  });

  it("a model cannot turn the browser's network on: allow_network in its call is dropped and the executor's setting stamped", async () => {
    const r = await noVision.execute("net", { name: "browser_navigate", arguments: { url: "data:text/html,<title>n</title>", allow_network: true } });
    expect(r.success, r.error).toBe(true);
    // The slot's terminal (whose network the browser joined) runs with the executor's setting: network off.
    const net = await noVision.execute("net", { name: "bash_stateful", arguments: { command: "awk -F: 'NR > 2 { print $1 }' /proc/net/dev | tr -d ' '" } });
    expect(net.output.trim()).toBe("lo");
    await noVision.release("net");
  });
});
