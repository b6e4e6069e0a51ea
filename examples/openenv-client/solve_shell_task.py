"""Solve one shell-tasks episode through OpenEnv's own client.

Start the server (from the repository, after `npm run build`):

    node dist/src/cli/main.js openenv-server examples/shell-tasks/env.js --port 8000

then run (with `pip install openenv` done):

    python examples/openenv-client/solve_shell_task.py http://127.0.0.1:8000

It resets into item 0 of shell-tasks ("create notes/day-0.txt holding one line"), lists
the tools, runs a bash command in the episode's own slot, ends the episode with `submit`,
and prints the reward computeReward gave (1.0). Pass --wrong to write the wrong line: 0.0.
A trainer's rollout function does the same, with its model choosing the tool calls.
"""

import argparse
import json

from openenv.core import GenericEnvClient


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("base_url", help="the openenv-server's URL, e.g. http://127.0.0.1:8000")
    parser.add_argument("--wrong", action="store_true", help="write the wrong line (reward 0)")
    args = parser.parse_args()

    with GenericEnvClient(base_url=args.base_url).sync() as env:
        result = env.reset(seed=0)
        task = result.observation["task"]
        tools = [t["name"] for t in result.observation["available_tools"]]
        print(f"task: {task}")
        print(f"tools: {', '.join(tools)}")

        line = "release 0 rejected" if args.wrong else "release 0 approved"
        result = env.step({"type": "call_tool", "tool_name": "bash", "arguments": {"command": f"mkdir -p notes && echo '{line}' > notes/day-0.txt && cat notes/day-0.txt"}})
        print(f"bash: {result.observation['result']['data']!r}")
        print(f"steps so far: {env.state()['step_count']}")

        result = env.step({"type": "call_tool", "tool_name": "submit", "arguments": {}})
        print(json.dumps({"done": result.done, "reward": result.reward}))


if __name__ == "__main__":
    main()
