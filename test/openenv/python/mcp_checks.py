"""/mcp driven by the MCP SDK for Python 2.3 (.build/python-mcp): its default client probes
server/discover and speaks the stateless revision 2026-07-28; mode='legacy' is the 2025-11-25
initialize handshake and sessions.

usage: mcp_checks.py SERVER_URL CHECK...   (one JSON line per check)
"""

import asyncio
import json
import sys

from mcp import Client

SERVER = sys.argv[1]
EPISODE = "dev.slotpool/episode"
SOLVE = "mkdir -p notes && echo 'release 0 approved' > notes/day-0.txt"


def text(result):
    return "".join(c.text for c in result.content if getattr(c, "type", "") == "text")


async def modern():
    async with Client(f"{SERVER}/mcp") as client:
        session = client.session
        discovered = session.discover_result
        tools = await client.list_tools()
        one = await client.call_tool("bash", {"command": "echo stateless"})
        first = await client.call_tool("bash", {"command": SOLVE}, meta={EPISODE: "new"})
        handle = (first.meta or {}).get(EPISODE)
        read = await client.call_tool("bash", {"command": "cat notes/day-0.txt"}, meta={EPISODE: handle})
        done = await client.call_tool("submit", {}, meta={EPISODE: handle})
        return {
            "era": "modern" if discovered is not None else "legacy",
            "versions": discovered.supported_versions if discovered else None,
            "tools": sorted(t.name for t in tools.tools),
            "one_shot": one.structured_content,
            "handle": handle,
            "read": read.structured_content.get("output"),
            "done": done.structured_content.get("done"),
            "reward": done.structured_content.get("reward"),
        }


async def legacy():
    async with Client(f"{SERVER}/mcp", mode="legacy") as client:
        tools = await client.list_tools()
        await client.call_tool("bash", {"command": "echo in-session > f.txt"})
        read = await client.call_tool("bash", {"command": "cat f.txt"})
        return {"era": "legacy" if client.session.initialize_result is not None else "modern", "tools": len(tools.tools), "read": text(read)}


CHECKS = {"modern": modern, "legacy": legacy}

for name in sys.argv[2:]:
    try:
        out = {"check": name, "ok": True, **asyncio.run(CHECKS[name]())}
    except Exception as e:  # noqa: BLE001 - reported to the test
        import traceback

        out = {"check": name, "ok": False, "error": f"{type(e).__name__}: {e}", "trace": traceback.format_exc()[-2000:]}
    print(json.dumps(out, default=str), flush=True)
