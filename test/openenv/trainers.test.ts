/**
 * The adapters of python/ (the slotpool-adapters package, installed from the checkout) with
 * the trainers' packages from the package index (.build/python-trainers): a slotpool env as a
 * SkyRL-gym 0.4 environment and as a verifiers 0.4 environment, each against a real OpenEnv
 * server. The actions SkyRL's generator would send are scripted here (no model, no GPU).
 */
import { execFile } from "node:child_process";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { pythonClients } from "../support/python-clients.js";
import { startOpenEnv, type OpenEnvHarness } from "./support.js";

const run = promisify(execFile);
const CHECKS = fileURLToPath(new URL("./python/trainer_checks.py", import.meta.url));
const py = pythonClients("python-trainers");

async function checks(url: string, ...names: string[]): Promise<Record<string, Record<string, any>>> {
  const { stdout } = await run(py.python!, [CHECKS, url, ...names], { timeout: 400_000 });
  return Object.fromEntries(stdout.trim().split("\n").map((l) => JSON.parse(l) as Record<string, any>).map((r) => [r["check"], r]));
}

describe.skipIf(py.python === null)(`SkyRL-gym 0.4 (slotpool_adapters.skyrl) and verifiers 0.4 (the slotpool-verifiers taskset)${py.reason ? ` (skipped: ${py.reason})` : ""}`, () => {
  let h: OpenEnvHarness;
  let r: Record<string, Record<string, any>>;
  beforeAll(async () => {
    h = await startOpenEnv({ slots: 2 });
    r = await checks(h.url, "skyrl_solved", "skyrl_wrong", "skyrl_plain_answer", "skyrl_bad_call", "skyrl_replay", "skyrl_trainer_config", "verifiers_solved", "verifiers_gave_up");
  }, 500_000);
  afterAll(async () => {
    await h?.stop();
  });

  it("skyrl_gym.make('slotpool') plays an episode: init gives the env's prompt with its tools, tool calls run in the slot, submit gets reward 1", () => {
    const s = r["skyrl_solved"]!;
    expect(s, JSON.stringify(s)).toEqual(expect.objectContaining({ ok: true, system_has_tools: true, done: true, reward: 1 }));
    expect(s["task"]).toContain("notes/day-0.txt");
    expect(s["second_observation"]).toContain("release 0 approved");
    expect(s["info"]).toEqual(expect.objectContaining({ item_index: 0, episode_id: expect.stringMatching(/^ep-0-/) }));
    expect(s["metrics"]).toEqual(expect.objectContaining({ reward: 1, infra_failure: 0 }));
  });

  it("a wrong answer scores 0; a reply with no tool call ends the episode; a bad tool call is an error the model reads", () => {
    expect(r["skyrl_wrong"]).toEqual(expect.objectContaining({ ok: true, done: true, reward: 0 }));
    expect(r["skyrl_plain_answer"]).toEqual(expect.objectContaining({ ok: true, done: true, reward: 0, steps: 1 }));
    const bad = r["skyrl_bad_call"]!;
    expect(bad, JSON.stringify(bad)).toEqual(expect.objectContaining({ ok: true, first_done: false, done: true }));
    expect(bad["first"]).toMatch(/not JSON/);
  });

  it("made as SkyRL 0.4's generator makes it (an empty env_config, the row's seed and max_turns in extras): the URL from SLOTPOOL_OPENENV_URL", () => {
    expect(r["skyrl_trainer_config"]).toEqual(expect.objectContaining({ ok: true, item: 0, done: true }));
  });

  it("an episode id the server handed out replays its item", () => {
    const replay = r["skyrl_replay"]!;
    expect(replay, JSON.stringify(replay)).toEqual(expect.objectContaining({ ok: true }));
    expect(replay["again"]).toBe(replay["first"]);
  });

  it("verifiers 0.4: its loader finds the slotpool-verifiers taskset and its Env; a player's tool calls run in the slot, submit records slotpool_reward 1 on the trace", () => {
    const v = r["verifiers_solved"]!;
    expect(v, JSON.stringify(v)).toEqual(expect.objectContaining({ ok: true, taskset: "SlotpoolTaskset", env: "SlotpoolEnv", task: "item 0", opening_has_tools: true, error: null, stop: "episode_done" }));
    expect(v["rewards"]).toEqual({ slotpool_reward: 1 });
    expect(v["heard"][0]).toContain("<tool_response>");
  });

  it("verifiers 0.4: a player that stops before submitting has its workspace scored as it is (0 for a wrong answer)", () => {
    const v = r["verifiers_gave_up"]!;
    expect(v, JSON.stringify(v)).toEqual(expect.objectContaining({ ok: true, error: null }));
    expect(v["rewards"]).toEqual({ slotpool_reward: 0 });
  });
});
