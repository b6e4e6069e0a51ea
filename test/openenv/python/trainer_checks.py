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


def skyrl_replay():
    # The same episode id replays the same item (the server's ids are signed).
    _, _, info, _ = skyrl_episode([call("submit")])
    _, _, again, _ = skyrl_episode([call("submit")], episode_id=info["episode_id"])
    return {"first": info["item_index"], "again": again["item_index"]}


CHECKS = {f.__name__: f for f in [skyrl_solved, skyrl_wrong, skyrl_plain_answer, skyrl_bad_call, skyrl_replay]}

for name in sys.argv[2:]:
    try:
        out = {"check": name, "ok": True, **CHECKS[name]()}
    except Exception as e:  # noqa: BLE001 - reported to the test
        import traceback

        out = {"check": name, "ok": False, "error": f"{type(e).__name__}: {e}", "trace": traceback.format_exc()[-1500:]}
    print(json.dumps(out), flush=True)
