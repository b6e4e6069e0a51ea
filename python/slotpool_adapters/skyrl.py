"""A slotpool env as a SkyRL-gym environment (skyrl-gym 0.4, `BaseTextEnv`), over OpenEnv.

SkyRL's generator makes one env per trajectory with `env_config` (this env's section of the
training config) and `extras` (the dataset row's fields), calls `init(prompt)` once and then
`step(action)` with each raw model reply until `done`. Here:

- `init` opens an OpenEnv session on `env_config.url` (`slotpool openenv-server`), resets it
  to the row's item (`extras["seed"]`, or `extras["episode_id"]`, else the server's next item)
  and answers the env's own prompt for that item: its system prompt with the tools described
  for Hermes tool calls, and the task. The row's `prompt` is not used: the item is the task.
- `step` runs each `<tool_call>` of the reply in the episode's slot and answers the results
  as a user turn; a reply without one, or the `submit` tool, or the env's turn limit ends
  the episode with the env's reward (computed in the slot).
- An infrastructure failure (slot lost, setup or reward code failed) ends the episode with
  reward 0.0 and `metadata["infra_failure"]`: SkyRL has no "no reward", so filter such
  trajectories out (they say nothing about the policy).

Register it with `register_env()` (id "slotpool"), then `skyrl_gym.make("slotpool", env_config=..., extras=...)`.
In SkyRL 0.4's trainer (`skyrl_gym_generator.py`): dataset rows with `env_class: "slotpool"` and
their `seed` (or `episode_id`) among the row's other fields (its extras); the server's URL in
SLOTPOOL_OPENENV_URL (its generator passes a new env class an empty env_config).
"""

from __future__ import annotations

import os
from typing import Any

from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput, ConversationType

from slotpool_adapters.client import EpisodeClient, EpisodeError, Step
from slotpool_adapters.tool_calls import parse_tool_calls, tool_response, tools_system_prompt

ENV_ID = "slotpool"


def _get(config: Any, key: str, default: Any = None) -> Any:
    if isinstance(config, dict):
        return config.get(key, default)
    return getattr(config, key, default)


class SlotpoolEnv(BaseTextEnv):
    """One trajectory of a slotpool env: one OpenEnv episode in one slot."""

    def __init__(self, env_config: Any, extras: dict[str, Any] | None = None) -> None:
        super().__init__()
        extras = extras or {}
        # SkyRL 0.4's trainer hands a new env class `getattr(skyrl_gym_cfg, "slotpool", {})`, and its
        # SkyRLGymConfig has sections for its own envs only: so the URL may also come with the row
        # (extras) or from the environment.
        self.url: str = _get(env_config, "url") or extras.get("openenv_url") or os.environ.get("SLOTPOOL_OPENENV_URL", "")
        if not self.url:
            raise ValueError("no server URL: give env_config.url, the row's openenv_url, or SLOTPOOL_OPENENV_URL (the URL of `slotpool openenv-server`, e.g. http://127.0.0.1:8000)")
        self.token: str | None = _get(env_config, "token") or os.environ.get("SLOTPOOL_OPENENV_TOKEN") or None
        self.seed: int | None = extras.get("seed")
        self.episode_id: str | None = extras.get("episode_id")
        self.client: EpisodeClient | None = None
        self.reward: float | None = None
        self.infra_failure: str | None = None
        self.episode: dict[str, Any] = {}

    def init(self, prompt: ConversationType) -> tuple[ConversationType, dict[str, Any]]:
        self.client = EpisodeClient(self.url, token=self.token)
        first = self.client.reset(seed=self.seed, episode_id=self.episode_id)
        obs = first.observation
        self.episode = {"episode_id": obs.get("episode_id"), "item_index": obs.get("item_index")}
        self.max_turns = int(obs.get("max_turns") or 1)
        messages = [m for m in obs.get("messages", []) if m.get("role") in ("system", "user")]
        system = next((m.get("content") for m in messages if m.get("role") == "system"), None)
        users = [{"role": "user", "content": m.get("content") or ""} for m in messages if m.get("role") == "user"]
        return [{"role": "system", "content": tools_system_prompt(obs.get("available_tools", []), system)}, *users], dict(self.episode)

    def step(self, action: str) -> BaseTextEnvStepOutput:
        assert self.client is not None, "init() first"
        self.turns += 1
        parsed = parse_tool_calls(action)
        if not parsed.calls and not parsed.errors:
            # The model answered without a tool call: its answer is final, the workspace is scored now.
            return self._run([("submit", {"answer": action.strip()})], [])
        return self._run([(c.name, c.arguments) for c in parsed.calls], parsed.errors)

    def _run(self, calls: list[tuple[str, dict[str, Any]]], errors: list[str]) -> BaseTextEnvStepOutput:
        answers = [tool_response("error", e) for e in errors]
        step: Step | None = None
        try:
            for name, args in calls:
                step = self.client.call_tool(name, args)  # type: ignore[union-attr]
                answers.append(tool_response(name, step.text))
                if step.done:
                    break
        except EpisodeError as e:
            if not e.infra_failure:
                answers.append(tool_response("error", str(e)))
                return self._output(answers, done=False)
            self.infra_failure = str(e)
            return self._output([], done=True, reward=0.0)
        if step is not None and step.done:
            self.reward = float(step.reward or 0.0)
            return self._output([], done=True, reward=self.reward, metadata=step.metadata)
        return self._output(answers, done=False)

    def _output(self, answers: list[str], done: bool, reward: float = 0.0, metadata: dict[str, Any] | None = None) -> BaseTextEnvStepOutput:
        meta = {**self.episode, **(metadata or {})}
        if self.infra_failure:
            meta["infra_failure"] = self.infra_failure
        observations = [] if done else [{"role": "user", "content": "\n".join(answers)}]
        return BaseTextEnvStepOutput(observations=observations, reward=reward, done=done, metadata=meta)

    def get_metrics(self) -> dict[str, Any]:
        return {"reward": self.reward if self.reward is not None else 0.0, "infra_failure": 1.0 if self.infra_failure else 0.0, "turns": float(self.turns)}

    def close(self) -> None:
        if self.client is not None:
            self.client.close()
            self.client = None


def register_env(env_id: str = ENV_ID) -> None:
    """Registers `SlotpoolEnv` with skyrl_gym under `env_id` (once)."""
    from skyrl_gym.envs.registration import register, registry

    if env_id not in registry:
        register(id=env_id, entry_point="slotpool_adapters.skyrl:SlotpoolEnv")
