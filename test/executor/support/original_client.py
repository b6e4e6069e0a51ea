"""
A client speaking the original (hermes-agent Atropos) executor API the way its Python code
does: pydantic-style bodies with every optional field present (None -> null), bearer auth,
stdlib only. Used by executor-server.test.ts: prints one JSON object with what it saw.

usage: python3 original_client.py BASE_URL TOKEN
"""
import json
import sys
import urllib.error
import urllib.request

BASE, TOKEN = sys.argv[1].rstrip("/"), sys.argv[2]


def call(method, path, payload=None):
    data = None if payload is None else json.dumps(payload).encode()
    req = urllib.request.Request(BASE + path, data=data, method=method)
    req.add_header("Content-Type", "application/json")
    req.add_header("Authorization", "Bearer " + TOKEN)
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def tool_call(name, arguments, uniq_id):
    # ToolCallPayload.model_dump()
    return {"name": name, "arguments": arguments, "uniq_id": uniq_id}


out = {}
tid = "py-traj-1"
out["write"] = call("POST", "/execute", {
    "trajectory_id": tid,
    "tool": tool_call("write_file", {"path": "notes/hello.txt", "content": "hi from python"}, "u-1"),
    "timeout_s": None,
})
out["terminal"] = call("POST", "/execute", {
    "trajectory_id": tid,
    "tool": tool_call("terminal", {"command": "cat notes/hello.txt && echo && ls notes", "timeout": 30}, "u-2"),
    "timeout_s": 30.0,
})
out["read"] = call("POST", "/artifacts/read", {
    "trajectory_id": tid, "path": "notes/hello.txt", "encoding": "text", "max_bytes": None, "include_sha256": False,
})
out["list"] = call("POST", "/artifacts/list", {"trajectory_id": tid, "path": "notes", "recursive": True, "max_entries": None})
out["archive"] = call("POST", "/artifacts/archive", {
    "trajectory_id": tid, "path": ".", "format": "tar.gz", "max_bytes": None, "max_entries": None,
})
out["status"] = call("GET", "/status")
out["release"] = call("POST", "/release", {"trajectory_id": tid, "reset_workspace": True})
print(json.dumps(out))
