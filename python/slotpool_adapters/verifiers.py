"""A slotpool env as a verifiers 0.4 environment (its v1 API: a taskset plugin with its own
`Env`), over OpenEnv's WebSocket protocol to `slotpool openenv-server`.

verifiers 0.4 has no `StatefulToolEnv` any more: an environment is a taskset package that
exports its `Taskset` (and here its `Env`) in `__all__`, named by `--env.taskset.id`:

    vf-eval slotpool-verifiers --env.taskset.base-url http://127.0.0.1:8000 \\
        --env.taskset.seeds '[0, 1, 2]' --model ... --client.base-url ...

Each task is one item of the served env (`seeds`, or `count` items in the server's order).
`SlotpoolEnv.run` plays the user, as verifiers' own OpenEnv taskset does: it resets an
OpenEnv episode (a slot of its own), opens the player's interaction with the env's prompt
and its tools (Hermes `<tool_call>` blocks, or OpenEnv's action JSON), runs each tool call
the player's reply holds in the slot and answers the results as the next user turn, until
`submit`, the env's turn limit, or a reply without a tool call (its final answer, then
scored). The env's reward (computeReward, in the slot) is recorded as `slotpool_reward`. An
infrastructure failure (slot lost, setup or reward code failed) raises: the episode fails
and has no reward, rather than a 0 the trainer would learn from.

Written against the client in `slotpool_adapters.client`, not OpenEnv's: verifiers pins
mcp 2.0.0, which the `openenv` package cannot install beside (its own OpenEnv taskset also
needs `_base_url` on OpenEnv's client).
"""

from __future__ import annotations

from collections.abc import Iterator

import verifiers.v1 as vf

from slotpool_adapters.client import AsyncEpisodeClient, EpisodeError, Step
from slotpool_adapters.tool_calls import parse_tool_calls, tool_response, tools_system_prompt


class SlotpoolData(vf.TaskData):
    base_url: str
    token: str | None = None
    seed: int | None = None
    episode_id: str | None = None


class SlotpoolConfig(vf.TasksetConfig):
    base_url: str = "http://127.0.0.1:8000"
    """The `slotpool openenv-server` to play."""
    token: str | None = None
    """Its bearer token (`--token` / OPENENV_TOKEN), if it has one."""
    seeds: list[int] | None = None
    """The items to play (their numbers in the env's order); default: 0 .. count-1."""
    count: int = 8
    """How many items when `seeds` is not given."""
    episode_ids: list[str] | None = None
    """Or: episode ids to replay (ids the server handed out replay their item)."""


class SlotpoolTask(vf.Task[SlotpoolData]):
    pass


class SlotpoolTaskset(vf.Taskset[SlotpoolTask, SlotpoolConfig]):
    def load(self) -> Iterator[SlotpoolTask]:
        c = self.config
        if c.episode_ids:
            for episode_id in c.episode_ids:
                yield SlotpoolTask(SlotpoolData(name=f"episode {episode_id}", base_url=c.base_url, token=c.token, episode_id=episode_id), c.task)
            return
        for seed in c.seeds if c.seeds is not None else range(c.count):
            yield SlotpoolTask(SlotpoolData(name=f"item {seed}", base_url=c.base_url, token=c.token, seed=seed), c.task)


class SlotpoolEnvConfig(vf.EnvConfig):
    player: vf.AgentConfig = vf.AgentConfig()


class SlotpoolEnv(vf.Env[SlotpoolEnvConfig]):
    async def run(self, task, agents) -> None:
        data = task.data
        client = await AsyncEpisodeClient.connect(data.base_url, token=data.token)
        try:
            first = await client.reset(seed=data.seed, episode_id=data.episode_id)
            obs = first.observation
            messages = obs.get("messages", [])
            system = next((m.get("content") for m in messages if m.get("role") == "system"), None)
            user = "\n\n".join(m.get("content") or "" for m in messages if m.get("role") == "user")
            opening = f"{tools_system_prompt(obs.get('available_tools', []), system)}\n\n{user}"
            async with agents.player.interaction(task) as interaction:
                trace = interaction.trace
                segment = await interaction.turn(opening)
                step: Step | None = None
                while not segment.terminated:
                    reply = segment.last_reply
                    parsed = parse_tool_calls(reply)
                    calls = [(c.name, c.arguments) for c in parsed.calls]
                    if not calls and not parsed.errors:
                        calls = [("submit", {"answer": reply})]  # a reply without a tool call is the final answer
                    answers = [tool_response("error", e) for e in parsed.errors]
                    for name, args in calls:
                        try:
                            step = await client.call_tool(name, args)
                        except EpisodeError as e:
                            if e.infra_failure:
                                trace.stop("infra_failure")
                                raise
                            answers.append(tool_response("error", str(e)))
                            continue
                        answers.append(tool_response(name, step.text))
                        if step.done:
                            break
                    if step is not None and step.done:
                        trace.record_reward("slotpool_reward", float(step.reward or 0.0))
                        trace.stop("episode_done")
                        break
                    segment = await interaction.turn("\n".join(answers))
                if step is None or not step.done:
                    # The player stopped (its own limits) before the episode ended: the workspace is scored as it is.
                    step = await client.call_tool("submit", {})
                    trace.record_reward("slotpool_reward", float(step.reward or 0.0))
        finally:
            await client.close()


__all__ = ["SlotpoolConfig", "SlotpoolData", "SlotpoolEnv", "SlotpoolEnvConfig", "SlotpoolTask", "SlotpoolTaskset"]
