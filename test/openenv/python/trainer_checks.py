"""The adapters of python/ (slotpool-adapters) with the trainers' own packages from the package
index (.build/python-trainers): SkyRL-gym 0.4 and verifiers 0.4, against a real
`slotpool openenv-server`.

usage: trainer_checks.py SERVER_URL CHECK...   (one JSON line per check)
"""

import json
import sys

SERVER = sys.argv[1]
SOLVE = "mkdir -p notes && echo 'release 0 approved' > notes/day-0.txt"
WRONG = "mkdir -p notes && echo 'release 0 rejected' > notes/day-0.txt"


def call(name, **arguments):
    return f'<tool_call>\n{json.dumps({"name": name, "arguments": arguments})}\n</tool_call>'


def skyrl_episode(actions, **extras):
    import skyrl_gym
    from slotpool_adapters.skyrl import register_env

    register_env()
    env = skyrl_gym.make("slotpool", env_config={"url": SERVER}, extras=extras)
    try:
        prompt, info = env.init([{"role": "user", "content": "ignored: the item is the task"}])
        steps = []
        for action in actions:
            out = env.step(action)
            steps.append(out)
            if out["done"]:
                break
        return env, prompt, info, steps
    finally:
        env.close()


def skyrl_solved():
    env, prompt, info, steps = skyrl_episode([call("bash", command=SOLVE), call("bash", command="cat notes/day-0.txt"), call("submit")], seed=0)
    return {
        "system_has_tools": "<tools>" in prompt[0]["content"] and '"bash"' in prompt[0]["content"],
        "task": prompt[-1]["content"],
        "info": info,
        "second_observation": steps[1]["observations"][0]["content"],
        "done": steps[-1]["done"],
        "reward": steps[-1]["reward"],
        "metrics": env.get_metrics(),
    }


def skyrl_wrong():
    _, _, _, steps = skyrl_episode([call("bash", command=WRONG), call("submit")], seed=0)
    return {"done": steps[-1]["done"], "reward": steps[-1]["reward"]}


def skyrl_plain_answer():
    # A reply with no tool call is the final answer: the workspace is scored as it is (nothing was done: 0).
    _, _, _, steps = skyrl_episode(["I am done."], seed=0)
    return {"done": steps[-1]["done"], "reward": steps[-1]["reward"], "steps": len(steps)}


def skyrl_bad_call():
    # A tool call that is not JSON is answered as an error the model can read; the episode goes on.
    _, _, _, steps = skyrl_episode(["<tool_call>{not json</tool_call>", call("submit")], seed=0)
    return {"first": steps[0]["observations"][0]["content"], "first_done": steps[0]["done"], "done": steps[-1]["done"]}


def skyrl_trainer_config():
    # As SkyRL 0.4's generator makes it: env_config {} (no section for a new env class), the URL from the environment.
    import os

    import skyrl_gym
    from slotpool_adapters.skyrl import register_env

    register_env()
    os.environ["SLOTPOOL_OPENENV_URL"] = SERVER
    try:
        env = skyrl_gym.make("slotpool", env_config={}, extras={"seed": 0, "max_turns": 5})
        prompt, info = env.init([{"role": "user", "content": "row prompt"}])
        out = env.step(call("submit"))
        env.close()
        return {"item": info["item_index"], "done": out["done"]}
    finally:
        del os.environ["SLOTPOOL_OPENENV_URL"]


def skyrl_replay():
    # The same episode id replays the same item (the server's ids are signed).
    _, _, info, _ = skyrl_episode([call("submit")])
    _, _, again, _ = skyrl_episode([call("submit")], episode_id=info["episode_id"])
    return {"first": info["item_index"], "again": again["item_index"]}


class ScriptedPlayer:
    """verifiers' `agents.player` with its replies scripted (no model here): `interaction(task)`
    and `turn(message)` as verifiers' Interaction has them, on a real `vf.Trace`."""

    def __init__(self, replies):
        self.replies = list(replies)
        self.heard = []

    def interaction(self, task):
        import contextlib

        from verifiers.v1.configs.agent import AgentConfig
        from verifiers.v1.trace import AgentInfo, Trace, TraceTask

        player = self

        class Interaction:
            trace = Trace(task=TraceTask(type=type(task).__name__, data=task.data, key=task.key, hash=task.hash), agent=AgentInfo(config=AgentConfig(), name="player"))

            async def turn(self, message):
                from verifiers.v1.agent import Segment
                from verifiers.v1.types import AssistantMessage

                player.heard.append(message)
                if not player.replies:
                    return Segment(messages=[], terminated=True)
                return Segment(messages=[AssistantMessage(content=player.replies.pop(0))])

        @contextlib.asynccontextmanager
        async def open_():
            yield Interaction()

        return open_()


def verifiers_episode(replies, **taskset):
    import asyncio
    import types

    from verifiers.v1.utils.loaders import environment_class, taskset_class

    from slotpool_verifiers import SlotpoolConfig, SlotpoolEnvConfig

    # verifiers' own loader finds the plugin by its id, and its Env base class takes the real config.
    env_cls = environment_class("slotpool-verifiers")
    env = env_cls(SlotpoolEnvConfig(taskset=SlotpoolConfig(id="slotpool-verifiers", base_url=SERVER, **taskset)))
    task = next(iter(env.taskset))
    player = ScriptedPlayer(replies)
    error = None
    trace = None

    async def go():
        nonlocal trace
        agents = types.SimpleNamespace(player=player)
        # Keep the trace the Interaction made, to read its rewards after run().
        orig = player.interaction

        def capture(t):
            cm = orig(t)

            class Wrap:
                async def __aenter__(self_inner):
                    nonlocal trace
                    i = await cm.__aenter__()
                    trace = i.trace
                    return i

                async def __aexit__(self_inner, *exc):
                    return await cm.__aexit__(*exc)

            return Wrap()

        player.interaction = capture
        await env.run(task, agents)

    try:
        asyncio.run(go())
    except Exception as e:  # noqa: BLE001 - the infra failure case raises
        error = f"{type(e).__name__}: {e}"
    return {
        "taskset": taskset_class("slotpool-verifiers").__name__,
        "env": env_cls.__name__,
        "task": task.data.name,
        "rewards": {k: v.score for k, v in (trace.rewards if trace else {}).items()},
        "stop": trace.stop_condition if trace else None,
        "opening_has_tools": bool(player.heard) and "<tools>" in player.heard[0],
        "heard": player.heard[1:],
        "error": error,
    }


def verifiers_solved():
    return verifiers_episode([call("bash", command=SOLVE), call("bash", command="cat notes/day-0.txt") + call("submit")], seeds=[0])


def verifiers_gave_up():
    # The player stops (its turn limit) before submitting: the workspace is scored as it is.
    return verifiers_episode([call("bash", command=WRONG)], seeds=[0])


CHECKS = {f.__name__: f for f in [skyrl_solved, skyrl_wrong, skyrl_plain_answer, skyrl_bad_call, skyrl_replay, skyrl_trainer_config, verifiers_solved, verifiers_gave_up]}

for name in sys.argv[2:]:
    try:
        out = {"check": name, "ok": True, **CHECKS[name]()}
    except Exception as e:  # noqa: BLE001 - reported to the test
        import traceback

        out = {"check": name, "ok": False, "error": f"{type(e).__name__}: {e}", "trace": traceback.format_exc()[-1500:]}
    print(json.dumps(out), flush=True)
