"""Drives slotpool's openenv-server with the real OpenEnv client (the `openenv` package):
each check prints one JSON line {check, ok, ...facts} for test/openenv/python-client.test.ts
to assert on. Usage: openenv_checks.py BASE_URL CHECK..."""

import asyncio
import json
import os
import subprocess
import sys

from openenv.core import GenericEnvClient, MCPToolClient
from openenv.core.env_server.mcp_types import CallToolAction

URL = sys.argv[1]
SOLVE = "mkdir -p notes && echo 'release 0 approved' > notes/day-0.txt"
WRONG = "mkdir -p notes && echo 'release 0 rejected' > notes/day-0.txt"


def call(tool, **arguments):
    return {"type": "call_tool", "tool_name": tool, "arguments": arguments}


def episode(command):
    with GenericEnvClient(base_url=URL).sync() as env:
        first = env.reset(seed=0)
        ran = env.step(call("bash", command=command + " && cat notes/day-0.txt"))
        state = env.state()
        end = env.step(call("submit"))
        return {"task": first.observation["task"], "output": ran.observation["result"]["data"], "step_count": state["step_count"], "done": end.done, "reward": end.reward}


def generic_solved():
    return episode(SOLVE)


def generic_wrong():
    return episode(WRONG)


def bad_message():
    with GenericEnvClient(base_url=URL).sync() as env:
        env.reset(seed=0)
        try:
            env.step({"type": "call_tool"})
            error = None
        except Exception as e:  # the client raises the server's error frame
            error = str(e)
        ran = env.step(call("bash", command="echo alive"))
        return {"error": error, "after": ran.observation["result"]["data"], "step_count": env.state()["step_count"]}


async def mcp_tool_client():
    async with MCPToolClient(base_url=URL) as env:
        await env.reset(seed=0)
        tools = await env.list_tools()
        out = await env.call_tool("bash", command=SOLVE + " && echo written")
        end = await env.step(CallToolAction(tool_name="submit", arguments={}))
        state = await env.state()
        return {"tools": sorted(t.name for t in tools), "bash_schema": next(t.input_schema for t in tools if t.name == "bash"), "output": out, "done": end.done, "reward": end.reward, "step_count": state.step_count}


async def isolated():
    a = GenericEnvClient(base_url=URL)
    b = GenericEnvClient(base_url=URL)
    async with a, b:
        await asyncio.gather(a.reset(seed=0), b.reset(seed=0))
        await a.step(call("bash", command="echo a > only-a.txt"))
        seen = await b.step(call("bash", command="cat only-a.txt 2>&1 || true"))
        return {"b_sees": seen.observation["result"]["data"]}


async def capacity():
    clients = [GenericEnvClient(base_url=URL) for _ in range(3)]
    for c in clients:
        await c.connect()
    try:
        await clients[0].reset()
        await clients[1].reset()
        try:
            await clients[2].reset()
            error = None
        except Exception as e:
            error = str(e)
        await clients[0].close()
        served = await clients[2].reset()
        return {"error": error, "served_after_close": served.done is False}
    finally:
        for c in clients[1:]:
            await c.close()


def lost_slot():
    # The test kills the pool's sandbox servers between "ready" and our next step.
    with GenericEnvClient(base_url=URL).sync() as env:
        env.reset(seed=0)
        env.step(call("bash", command=SOLVE))
        print(json.dumps({"check": "lost_slot", "phase": "ready"}), flush=True)
        sys.stdin.readline()
        try:
            env.step(call("bash", command="true"))
            error = None
        except Exception as e:  # the client raises the server's error frame
            error = str(e)
        state = env.state()
        # The session lives on: a new episode runs on the container the pool put in place.
        again = env.reset(seed=0)
        ran = env.step(call("bash", command="echo back"))
        return {"error": error, "done": state["done"], "reward": state["reward"], "after_reset": again.done is False and ran.observation["result"]["data"] == "back"}


def validate():
    # OpenEnv's own runtime conformance checks, as its users run them: `openenv validate URL --json`.
    cli = os.path.join(os.path.dirname(sys.executable), "openenv")
    run = subprocess.run([cli, "validate", URL, "--json"], capture_output=True, text=True, timeout=120)
    report = json.loads(run.stdout)
    return {"exit_code": run.returncode, "passed": report["passed"], "mode": report["mode"], "profile": report["standard_profile"], "failed": [c["id"] for c in report["criteria"] if not c["passed"]], "criteria": sorted(c["id"] for c in report["criteria"])}


CHECKS = {"generic_solved": generic_solved, "generic_wrong": generic_wrong, "bad_message": bad_message, "mcp_tool_client": mcp_tool_client, "isolated": isolated, "capacity": capacity, "lost_slot": lost_slot, "validate": validate}

for name in sys.argv[2:]:
    fn = CHECKS[name]
    try:
        facts = asyncio.run(fn()) if asyncio.iscoroutinefunction(fn) else fn()
        print(json.dumps({"check": name, "ok": True, **facts}), flush=True)
    except Exception as e:
        print(json.dumps({"check": name, "ok": False, "error": f"{type(e).__name__}: {e}"}), flush=True)
