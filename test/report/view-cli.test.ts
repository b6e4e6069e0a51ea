/**
 * `slotpool view FILE.jsonl [--out F] [--serve --port N]`, spawned as a user runs it, on a
 * JSONL as Atropos's process mode writes it (no slotpool extras).
 */
import { spawn, type ChildProcess } from "node:child_process";
import { mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { slotpoolCommand } from "../../src/pool/slotpool-command.js";
import { launchBrowser } from "../support/browser.js";

let dir: string;
let jsonl: string;

/** Two groups in Atropos's process-mode shape: tokens, masks, scores, messages, explicit nulls. */
const ATROPOS_LINES = [
  {
    tokens: [[1, 2, 3], [4, 5, 6, 7]],
    masks: [[-100, 2, 3], [-100, -100, 6, 7]],
    scores: [1.0, 0.0],
    advantages: null,
    ref_logprobs: null,
    messages: [
      [{ role: "user", content: "Name a prime." }, { role: "assistant", content: "7" }],
      [{ role: "user", content: "Name a prime." }, { role: "assistant", content: "9" }],
    ],
    generation_params: null,
    inference_logprobs: null,
    overrides: null,
    group_overrides: null,
    images: null,
    env_id: null,
  },
  {
    tokens: [[8, 9]],
    masks: [[8, 9]],
    scores: [-1.0],
    messages: [[{ role: "user", content: "Name an even prime." }, { role: "assistant", content: "4" }]],
  },
];

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "view-cli-"));
  jsonl = join(dir, "atropos.jsonl");
  await writeFile(jsonl, ATROPOS_LINES.map((l) => JSON.stringify(l)).join("\n") + "\n");
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

function start(args: string[]): ChildProcess {
  const { command, args: base } = slotpoolCommand();
  return spawn(command, [...base, ...args], { stdio: ["ignore", "pipe", "pipe"] });
}

function runCli(args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const child = start(args);
  let stdout = "";
  let stderr = "";
  child.stdout!.on("data", (c: Buffer) => (stdout += c.toString()));
  child.stderr!.on("data", (c: Buffer) => (stderr += c.toString()));
  return new Promise((done) => child.on("exit", (code) => done({ code, stdout, stderr })));
}

describe("slotpool view", () => {
  it("writes the report beside the JSONL, or where --out says", async () => {
    const r = await runCli(["view", jsonl]);
    expect(r.stderr).toBe("");
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/atropos\.html: 3 trajectories in 2 groups, [\d.]+ MB\n$/);
    const html = await readFile(join(dir, "atropos.html"), "utf8");
    expect(html).toContain("Name an even prime.");
    expect(html.match(/<details class="traj"/g)).toHaveLength(3);
    const out = join(dir, "sub", "x.html");
    await mkdir(join(dir, "sub"));
    expect((await runCli(["view", jsonl, "--out", out])).code).toBe(0);
    expect(await readFile(out, "utf8")).toContain("Name a prime.");
  }, 30_000);

  it("bad command lines name the problem and exit 2", async () => {
    const missing = await runCli(["view", join(dir, "nope.jsonl")]);
    expect(missing.code).toBe(2);
    expect(missing.stderr).toContain(`no such file: ${join(dir, "nope.jsonl")}`);
    const folder = await runCli(["view", dir]);
    expect(folder.code).toBe(2);
    expect(folder.stderr).toContain("is not a file");
    const port = await runCli(["view", jsonl, "--port", "9"]);
    expect(port.code).toBe(2);
    expect(port.stderr).toContain("--port goes with --serve");
    const none = await runCli(["view"]);
    expect(none.code).toBe(2);
    expect(none.stderr).toContain("missing FILE.jsonl");
  }, 30_000);

  it("--serve serves the page and its JSONL lines on 127.0.0.1, re-read on each load, until SIGTERM", async () => {
    const child = start(["view", jsonl, "--serve", "--port", "0"]);
    let stdout = "";
    const url = await new Promise<string>((resolve, reject) => {
      child.stdout!.on("data", (c: Buffer) => {
        stdout += c.toString();
        const m = /at (http:\/\/127\.0\.0\.1:\d+)\//.exec(stdout);
        if (m) resolve(m[1]!);
      });
      child.on("exit", (code) => reject(new Error(`view exited ${code}: ${stdout}`)));
    });
    const exited = new Promise<number | null>((resolve) => child.on("exit", resolve));
    try {
      expect(stdout).toMatch(/ssh -L (\d+):127\.0\.0\.1:\1 /);
      const page = await fetch(`${url}/`);
      expect(page.status).toBe(200);
      expect(page.headers.get("content-type")).toBe("text/html; charset=utf-8");
      expect(await page.text()).toContain('<a href="line/2">line 2</a>');
      const line = await fetch(`${url}/line/2`);
      expect(await line.json()).toEqual(ATROPOS_LINES[1]);
      expect((await fetch(`${url}/line/3`)).status).toBe(404);
      expect((await fetch(`${url}/elsewhere`)).status).toBe(404);

      // A group appended while serving shows on the next load, in a real browser.
      await writeFile(jsonl, JSON.stringify({ scores: [0.5], messages: [[{ role: "user", content: "appended later" }]] }) + "\n", { flag: "a" });
      const browser = await launchBrowser();
      try {
        const tab = await browser.context.newPage();
        await tab.goto(`${url}/`);
        await tab.waitForSelector("html[data-ready='1']");
        expect(await tab.locator("details.traj").count()).toBe(4);
        expect(await tab.locator("#f-count").textContent()).toBe("4 of 4 trajectories shown");
        await tab.locator("#g2t0 summary").first().click();
        await tab.locator("#g2t0 .meta a").click();
        expect(await tab.locator("body").textContent()).toContain("appended later");
      } finally {
        await browser.close();
      }
    } finally {
      child.kill("SIGTERM");
    }
    expect(await exited).toBe(0);
  }, 60_000);
});
