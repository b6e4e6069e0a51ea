"""A small client of OpenEnv's WebSocket protocol as `slotpool openenv-server` serves it.

One `EpisodeClient` is one session (one WebSocket at `/ws`): `reset` begins an episode in a
slot of its own and answers its task, `call_tool` runs a tool there, the `submit` tool (or the
env's turn limit) ends it with the env's reward. Written here rather than taken from the
`openenv` package: the trainers' libraries pin versions of `mcp` that OpenEnv's client cannot
install beside (verifiers 0.4 pins mcp 2.0.0, OpenEnv 0.10 needs mcp < 2).

Errors are `EpisodeError` with OpenEnv's code; an infrastructure failure (`infra_failure`:
the slot was lost, setup or the reward failed) ends the episode without a reward, and must not
be trained on as a zero.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode, urlsplit, urlunsplit


class EpisodeError(RuntimeError):
    """An error frame of the server: `code` is OpenEnv's (VALIDATION_ERROR, CAPACITY_REACHED, ...)."""

    def __init__(self, message: str, code: str, data: dict[str, Any] | None = None) -> None:
        super().__init__(f"{message} (code: {code})")
        self.code = code
        self.data = data or {}

    @property
    def infra_failure(self) -> bool:
        """Whether the infrastructure, not the agent, failed: the episode is over and has no reward."""
        return bool(self.data.get("infra_failure"))


@dataclass
class Step:
    """One answer of the episode: the observation, and the reward once it is done."""

    observation: dict[str, Any]
    reward: float | None
    done: bool
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def text(self) -> str:
        """What the env's own model would read of a tool's answer (output, exit code, error)."""
        result = self.observation.get("result") or {}
        content = result.get("content") or []
        if content and isinstance(content[0], dict) and "text" in content[0]:
            return str(content[0]["text"])
        error = self.observation.get("error")
        return str(error.get("message")) if isinstance(error, dict) else ""


def ws_url(base_url: str, token: str | None = None) -> str:
    """The session endpoint of a server URL (http(s)://host:port -> ws(s)://host:port/ws)."""
    parts = urlsplit(base_url)
    scheme = {"http": "ws", "https": "wss"}.get(parts.scheme, parts.scheme)
    path = parts.path.rstrip("/")
    if not path.endswith("/ws"):
        path = f"{path}/ws"
    query = urlencode({"token": token}) if token else parts.query
    return urlunsplit((scheme, parts.netloc, path, query, ""))


def _headers(token: str | None) -> dict[str, str] | None:
    return {"Authorization": f"Bearer {token}"} if token else None


def _read(frame_text: str | bytes) -> dict[str, Any]:
    frame = json.loads(frame_text)
    if frame.get("type") == "error":
        data = frame.get("data") or {}
        raise EpisodeError(str(data.get("message", "error")), str(data.get("code", "EXECUTION_ERROR")), data)
    return frame


def _step(frame: dict[str, Any]) -> Step:
    data = frame.get("data") or {}
    return Step(observation=data.get("observation") or {}, reward=data.get("reward"), done=bool(data.get("done")), metadata=data.get("metadata") or {})


def _reset_message(seed: int | None, episode_id: str | None) -> str:
    data: dict[str, Any] = {}
    if seed is not None:
        data["seed"] = seed
    if episode_id is not None:
        data["episode_id"] = episode_id
    return json.dumps({"type": "reset", "data": data})


def _call_message(tool: str, arguments: dict[str, Any]) -> str:
    return json.dumps({"type": "step", "data": {"type": "call_tool", "tool_name": tool, "arguments": arguments}})


class EpisodeClient:
    """One OpenEnv session over a WebSocket, blocking (SkyRL-gym's envs are synchronous)."""

    def __init__(self, base_url: str, token: str | None = None, open_timeout: float = 30.0) -> None:
        from websockets.sync.client import connect

        self._ws = connect(ws_url(base_url), additional_headers=_headers(token), open_timeout=open_timeout, max_size=None)

    def _send(self, message: str) -> dict[str, Any]:
        self._ws.send(message)
        return _read(self._ws.recv())

    def reset(self, seed: int | None = None, episode_id: str | None = None) -> Step:
        return _step(self._send(_reset_message(seed, episode_id)))

    def call_tool(self, tool: str, arguments: dict[str, Any]) -> Step:
        return _step(self._send(_call_message(tool, arguments)))

    def close(self) -> None:
        try:
            self._ws.send(json.dumps({"type": "close"}))
        except Exception:  # noqa: BLE001 - the connection may already be gone
            pass
        self._ws.close()


class AsyncEpisodeClient:
    """The same session for asyncio code (verifiers' envs are coroutines)."""

    def __init__(self, ws: Any) -> None:
        self._ws = ws

    @classmethod
    async def connect(cls, base_url: str, token: str | None = None, open_timeout: float = 30.0) -> "AsyncEpisodeClient":
        from websockets.asyncio.client import connect

        return cls(await connect(ws_url(base_url), additional_headers=_headers(token), open_timeout=open_timeout, max_size=None))

    async def _send(self, message: str) -> dict[str, Any]:
        await self._ws.send(message)
        return _read(await self._ws.recv())

    async def reset(self, seed: int | None = None, episode_id: str | None = None) -> Step:
        return _step(await self._send(_reset_message(seed, episode_id)))

    async def call_tool(self, tool: str, arguments: dict[str, Any]) -> Step:
        return _step(await self._send(_call_message(tool, arguments)))

    async def close(self) -> None:
        try:
            await self._ws.send(json.dumps({"type": "close"}))
        except Exception:  # noqa: BLE001 - the connection may already be gone
            pass
        await self._ws.close()
