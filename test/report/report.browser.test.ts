/**
 * The report of real runs, in headless Chromium: a `slotpool process` of the example env
 * (oracle policy), and a run against a scripted model whose tool calls fail and whose output
 * is hostile HTML. Screenshots are kept under test-results/report/.
 */
import { spawn } from "node:child_process";
import { mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import type { Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { slotpoolCommand } from "../../src/pool/slotpool-command.js";
import type { ToolBackend } from "../../src/env/backend.js";
import { AgentEnvConfigSchema } from "../../src/env/config.js";
import { poolBackend } from "../../src/env/pool-backend.js";
import { runProcessMode } from "../../src/env/run-modes/process.js";
import { writeReport } from "../../src/report/index.js";
import { silentLogger } from "../../src/observability/logger.js";
import { LocalProvisioner } from "../../src/pool/local-provisioner.js";
import { launchBrowser, type TestBrowser } from "../support/browser.js";
import { startLlmServer, taskOf, turnOf, type ChatRequestBody, type LlmServer } from "../support/llm-server.js";
import { WriteFileEnv } from "../env/support/counting-env.js";

const ARTIFACTS = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..", "test-results", "report");
const XSS = `<script>window.__xss = 1</script><img src=x onerror="window.__xss = 2"><b>not bold</b>`;

let dir: string;
let browser: TestBrowser;
let backend: ToolBackend | undefined;
let llm: LlmServer | undefined;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "report-browser-"));
  await mkdir(ARTIFACTS, { recursive: true });
  browser = await launchBrowser();
});
afterAll(async () => {
  await browser?.close();
  await llm?.close();
  await backend?.close();
  await rm(dir, { recursive: true, force: true });
});

function runCli(args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const { command, args: base } = slotpoolCommand();
  return new Promise((done) => {
    const child = spawn(command, [...base, ...args], { stdio: ["ignore", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (c: Buffer) => (stdout += c.toString()));
    child.stderr.on("data", (c: Buffer) => (stderr += c.toString()));
    child.on("exit", (code) => done({ code, stdout, stderr }));
  });
}

/** Opens a page that records any dialog or script error, so "nothing ran" can be asserted. */
async function openReport(url: string): Promise<{ page: Page; dialogs: string[]; errors: string[] }> {
  const page = await browser.context.newPage();
  const dialogs: string[] = [];
  const errors: string[] = [];
  page.on("dialog", (d) => {
    dialogs.push(d.message());
    void d.dismiss();
  });
  page.on("pageerror", (e) => errors.push(e.message));
  page.on("console", (m) => {
    if (m.type() === "error") errors.push(m.text());
  });
  await page.goto(url);
  await page.waitForSelector("html[data-ready='1']");
  return { page, dialogs, errors };
}

/** Waits until every open trajectory has built its conversation. */
async function allRendered(page: Page): Promise<void> {
  await page.waitForFunction(() => Array.from(document.querySelectorAll("details.traj[open]")).every((d) => d.querySelector("ol.conv")));
}

const shownTrajectories = (page: Page) => page.locator("details.traj:visible").count();

describe("the HTML report in a real browser", () => {
  it("shows every group, trajectory and tool call of a real `slotpool process` run, and filters by score", async () => {
    const out = join(dir, "shell-tasks.jsonl");
    const r = await runCli(["process", "examples/shell-tasks/env.ts", "--out", out, "--groups", "4", "--group-size", "2", "--no-progress"]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toMatch(new RegExp(`^  report +${join(dir, "shell-tasks.html").replace(/[.*+?^${}()|[\]\\]/g, "\\$&")} `, "m"));
    expect(r.stdout).toMatch(/slowest tools:\n\s+tool\s+calls\s+errors\s+p50\s+p99\s+max\n\s+(bash|read_file|write_file)\s+\d+\s+0/);

    const { page, dialogs, errors } = await openReport(pathToFileURL(join(dir, "shell-tasks.html")).href);
    expect(await page.locator("section.group").count()).toBe(4);
    expect(await page.locator("details.traj").count()).toBe(8);
    expect(await page.locator("#f-count").textContent()).toBe("8 of 8 trajectories shown");
    // The four task kinds, each as the user message of its group.
    await page.click("#f-expand");
    await allRendered(page);
    const users = await page.locator("li.m-user pre").allTextContents();
    for (const task of ["Create the file notes/day-0.txt", "Fix calc.sh", "Count the files whose name ends in", "Exactly one file under tree/ contains"]) {
      expect(users.some((u) => u.includes(task)), task).toBe(true);
    }
    // The fix-script trajectory: read_file, then write_file and bash in one turn, each result with exit code and time.
    await page.click("#f-collapse");
    const fixGroup = await page.locator("details.traj", { hasText: "3 turns · 3 tool calls" }).first().getAttribute("id");
    const fix = page.locator(`#${fixGroup}`);
    await fix.locator("summary").first().click();
    await fix.locator("ol.conv").waitFor();
    expect(await fix.locator("li.call code.fn").allTextContents()).toEqual(["read_file", "write_file", "bash"]);
    expect(await fix.locator("li.call pre").nth(2).textContent()).toBe("command: bash calc.sh 2 3 4");
    const results = await fix.locator("li.result .rmeta").allTextContents();
    expect(results).toHaveLength(3);
    for (const meta of results) expect(meta).toMatch(/exit 0 · [\d.]+ (ms|s)$/);
    expect(await fix.locator("li.result pre").last().textContent()).toBe("9");
    expect(await page.locator(".panel h2", { hasText: "Tools, slowest first" }).count()).toBe(1);

    await fix.scrollIntoViewIfNeeded();
    await page.screenshot({ path: join(ARTIFACTS, "shell-tasks.png"), fullPage: false });

    // All scored 1: score ≥ 1 keeps all, score ≥ 2 hides all (and their groups).
    await page.fill("#f-min", "1");
    expect(await shownTrajectories(page)).toBe(8);
    await page.fill("#f-min", "2");
    expect(await shownTrajectories(page)).toBe(0);
    expect(await page.locator("section.group:visible").count()).toBe(0);
    expect(await page.locator("#f-count").textContent()).toBe("0 of 8 trajectories shown");
    await page.click("#f-clear");
    expect(await shownTrajectories(page)).toBe(8);
    expect(dialogs).toEqual([]);
    expect(errors).toEqual([]);
    await page.close();
  }, 120_000);

  it("at a 1400 px wide window no panel is clipped: every panel shows its whole content, none reaches past the window; tiles for failed groups and infra failures", async () => {
    const out = join(dir, "wide.jsonl");
    const r = await runCli(["process", "examples/shell-tasks/env.ts", "--out", out, "--groups", "4", "--group-size", "2", "--no-progress"]);
    expect(r.code, r.stderr).toBe(0);
    const { page, errors } = await openReport(pathToFileURL(join(dir, "wide.html")).href);
    for (const width of [1400, 1280]) {
      await page.setViewportSize({ width, height: 900 });
      const layout = await page.evaluate(() => ({
        page: document.documentElement.scrollWidth,
        panels: Array.from(document.querySelectorAll<HTMLElement>(".panel")).map((p) => ({
          title: p.querySelector("h2")?.textContent ?? "",
          overflowX: p.scrollWidth - p.clientWidth,
          overflowY: p.scrollHeight - p.clientHeight,
          right: p.getBoundingClientRect().right,
        })),
      }));
      expect(layout.page, `page wider than the ${width} px window`).toBeLessThanOrEqual(width);
      expect(layout.panels.map((p) => p.title)).toEqual(["Scores (click a bar to filter)", "Tools, slowest first", "Slowest tool calls", "Run"]);
      for (const p of layout.panels) {
        expect(p.overflowX, `${p.title} at ${width} px: content cut horizontally`).toBeLessThanOrEqual(1);
        expect(p.overflowY, `${p.title} at ${width} px: content cut vertically`).toBeLessThanOrEqual(1);
        expect(p.right, `${p.title} at ${width} px`).toBeLessThanOrEqual(width);
      }
    }
    await page.screenshot({ path: join(ARTIFACTS, "report-1400.png"), fullPage: true });
    const tiles = await page.locator(".card span").allTextContents();
    expect(tiles).toContain("failed groups (not in the file)");
    expect(tiles).toContain("infra failures (not scored)");
    expect(errors).toEqual([]);
    await page.close();
  }, 120_000);

  it("a model run with failing tool calls and hostile output: errors highlighted and filterable, no script runs, HTML shows as text", async () => {
    const provisioner = new LocalProvisioner({ slotsPerContainer: 4 });
    backend = await poolBackend(AgentEnvConfigSchema.parse({ pool: { slotsPerContainer: 4, minContainers: 1, maxContainers: 2, acquireTimeoutMs: 30_000 }, executor: { defaultTimeoutS: 30 } }), provisioner, silentLogger());
    // Even tasks: a failing `cat`, then the right file (score 1). Odd tasks: print HTML, write nothing (score 0).
    llm = await startLlmServer({
      respond: (body: ChatRequestBody) => {
        const m = /TASK (\d+): create (\S+) containing exactly '([^']*)'/.exec(taskOf(body))!;
        const even = Number(m[1]) % 2 === 0;
        const turn = turnOf(body);
        if (even && turn === 1) return { toolCalls: [{ name: "bash", arguments: { command: "cat missing.txt" } }], reasoning: "<i>first look</i> around" };
        if (even && turn === 2) return { toolCalls: [{ name: "bash", arguments: { command: `printf '%s' '${m[3]}' > ${m[2]}` } }] };
        if (!even && turn === 1) return { toolCalls: [{ name: "bash", arguments: { command: `echo '<script>window.__xss = 3</script><b>tool bold</b>'` } }] };
        return { text: `Finished. ${XSS}` };
      },
    });
    const env = new WriteFileEnv({ groupSize: 2, model: { url: llm.url, name: "scripted" }, maxTurns: 5 }, { backend, logger: silentLogger() });
    await env.start();
    const out = join(dir, "model-run.jsonl");
    const run = await runProcessMode(env, { out, groups: 4 });
    await env.close();
    expect(run.written).toBe(4);
    expect(run.report?.path).toBe(join(dir, "model-run.html"));
    expect(run.stats.toolErrorLog.map((e) => e.tool)).toEqual(["bash", "bash", "bash", "bash"]);
    // The JSONL keeps Atropos's fields and adds the extras under one key.
    const line = JSON.parse((await readFile(out, "utf8")).split("\n")[0]!) as Record<string, unknown>;
    expect(Object.keys(line)).toEqual(expect.arrayContaining(["tokens", "masks", "scores", "messages", "slotpool"]));

    const { page, dialogs, errors } = await openReport(pathToFileURL(run.report!.path).href);
    await page.click("#f-expand");
    await allRendered(page);
    await page.locator("details.more > summary, details.fold > summary").evaluateAll((els) => els.forEach((s) => ((s.parentElement as HTMLDetailsElement).open = true)));
    // Nothing the model or the tools wrote ran: no dialog, no flag, no <img> or <b> from them.
    expect(await page.evaluate(() => (window as unknown as { __xss?: number }).__xss)).toBeUndefined();
    expect(dialogs).toEqual([]);
    expect(errors).toEqual([]);
    expect(await page.locator("main img, main b, main i").count()).toBe(0);
    // …and it is all visible as text.
    const assistant = await page.locator("li.m-assistant pre").allTextContents();
    expect(assistant.filter((t) => t === `Finished. ${XSS}`)).toHaveLength(8);
    const outputs = await page.locator("li.result pre").allTextContents();
    expect(outputs).toContain("<script>window.__xss = 3</script><b>tool bold</b>");
    expect(await page.locator("li.thinking pre").first().textContent()).toBe("<i>first look</i> around");

    // Tool errors: highlighted results, the seed-format list, the filter.
    expect(await page.locator("li.result.err").count()).toBe(4);
    expect(await page.locator("li.result.err .rmeta").first().textContent()).toMatch(/^bash · exit 1 · [\d.]+ m?s · error: Exit code: 1$/);
    const errorLines = await page.locator("#tool-errors li").allTextContents();
    expect(errorLines).toHaveLength(4);
    for (const l of errorLines) expect(l).toMatch(/^g\dt[01] \[turn 1\] bash\(\{"command":"cat missing\.txt"\}\) -> Exit code: 1$/);
    await page.click("#f-collapse");
    // Groups are written as they finish, so which group holds which task is read from the page.
    await page.check("#f-err");
    expect(await shownTasks(page)).toEqual([0, 0, 2, 2]);
    await page.uncheck("#f-err");
    await page.fill("#f-max", "0");
    expect(await shownTasks(page)).toEqual([1, 1, 3, 3]);
    // A histogram bar (score 1) sets the range.
    await page.click("#f-clear");
    await page.locator("button.bar").last().click();
    expect(await page.inputValue("#f-min")).toBe("1");
    expect(await shownTasks(page)).toEqual([0, 0, 2, 2]);
    // A link from the error list opens its trajectory.
    await page.click("#f-clear");
    const link = page.locator("#tool-errors a").first();
    const target = (await link.getAttribute("href"))!.slice(1);
    await link.click();
    expect(await page.locator(`#${target}`).evaluate((d) => (d as HTMLDetailsElement).open)).toBe(true);
    await page.screenshot({ path: join(ARTIFACTS, "model-run.png"), fullPage: false });
    await page.close();
  }, 120_000);
});

describe("long texts in the browser", () => {
  it("shows 16 lines, the rest one click away, and names the JSONL line for what the file left out", async () => {
    const long = Array.from({ length: 40 }, (_, i) => `line ${i}`).join("\n");
    const huge = "z".repeat(300_000);
    const jsonl = join(dir, "big.jsonl");
    const line = { scores: [1], messages: [[{ role: "user", content: long }, { role: "assistant", content: null, tool_calls: [{ id: "a", type: "function", function: { name: "bash", arguments: '{"command":"yes z"}' } }] }, { role: "tool", tool_call_id: "a", content: JSON.stringify({ output: huge, exit_code: 0 }) }]] };
    await writeFile(jsonl, "\n" + JSON.stringify(line) + "\n");
    const r = await writeReport(jsonl, { textBudget: 50_000 });
    expect(r.bytes).toBeLessThan(80_000);
    const { page, errors } = await openReport(pathToFileURL(r.path).href);
    await page.locator("#g0t0 summary").first().click();
    await page.locator("#g0t0 ol.conv").waitFor();
    const user = page.locator("#g0t0 li.m-user");
    const head = Array.from({ length: 16 }, (_, i) => `line ${i}\n`).join("");
    expect(await user.locator("pre").first().textContent()).toBe(head);
    expect(await user.locator("details.more summary").textContent()).toBe(`show ${long.length - head.length} more characters`);
    await user.locator("details.more summary").click();
    expect(await user.locator("pre").last().textContent()).toContain("line 39");
    const result = page.locator("#g0t0 li.result");
    await result.locator("details.more summary").click();
    expect(await result.locator("p.cut").textContent()).toMatch(/^✂ [\d,]+ more characters are not in this report: see line 2 of big\.jsonl$/);
    const shown = (await result.locator("pre").allTextContents()).join("");
    expect(shown.length).toBeGreaterThanOrEqual(800);
    expect(shown.length).toBeLessThan(300_000);
    expect(errors).toEqual([]);
    await page.close();
  }, 60_000);
});

/** The TASK numbers of the trajectories shown, sorted. */
async function shownTasks(page: Page): Promise<number[]> {
  const users = await page.locator("details.traj:visible li.m-user pre").allTextContents();
  return users.map((u) => Number(/^TASK (\d+):/.exec(u)![1])).sort((a, b) => a - b);
}
