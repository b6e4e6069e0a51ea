"""Tool calls in text, for trainers whose envs see the model's raw reply (SkyRL-gym's
text-in/text-out step, verifiers' user-turn loop): the Hermes format slotpool's own agent
loop speaks (`<tool_call>{"name": ..., "arguments": {...}}</tool_call>`, the tools described
in the system prompt), and OpenEnv's own action JSON (`{"tool_name": ..., "arguments": ...}`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

_BLOCK = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)
_NAME_JSON = re.compile(r"^([A-Za-z0-9_-]{1,64})\s*(\{.*\})$", re.DOTALL)


@dataclass
class ToolCall:
    name: str
    arguments: dict[str, Any]


@dataclass
class Parsed:
    calls: list[ToolCall]
    #: One message per block that did not parse: given back to the model as the tool's error.
    errors: list[str]


def tools_system_prompt(tools: list[dict[str, Any]], system_prompt: str | None = None) -> str:
    """The Hermes function-calling prompt for `tools` (as `available_tools` lists them), after the env's own system prompt."""
    sigs = "\n".join(
        json.dumps({"type": "function", "function": {"name": t["name"], "description": t.get("description", ""), "parameters": t.get("input_schema", {"type": "object"})}})
        for t in tools
    )
    prompt = (
        "You are a function calling AI model. You are provided with function signatures within <tools></tools> XML tags. "
        "You may call one or more functions to assist with the user query. Don't make assumptions about what values to plug into functions. "
        f"Here are the available tools: <tools>\n{sigs}\n</tools>\n"
        "For each function call return a json object with function name and arguments within <tool_call></tool_call> XML tags as follows:\n"
        '<tool_call>\n{"name": <function-name>, "arguments": <args-dict>}\n</tool_call>'
    )
    return f"{system_prompt}\n\n{prompt}" if system_prompt else prompt


def parse_tool_calls(text: str) -> Parsed:
    """Every tool call of a reply: its `<tool_call>` blocks, else the whole reply as OpenEnv action JSON."""
    calls: list[ToolCall] = []
    errors: list[str] = []
    blocks = _BLOCK.findall(text)
    if not blocks:
        stripped = text.strip()
        if stripped.startswith("```") and stripped.endswith("```"):
            stripped = "\n".join(stripped.splitlines()[1:-1]).strip()
        if stripped.startswith("{"):
            blocks = [stripped]
    for body in blocks:
        call = _one(body)
        if isinstance(call, str):
            errors.append(call)
        else:
            calls.append(call)
    return Parsed(calls, errors)


def _one(body: str) -> ToolCall | str:
    m = _NAME_JSON.match(body)
    try:
        if m:
            return ToolCall(m.group(1), _object(json.loads(m.group(2))))
        value = json.loads(body)
    except json.JSONDecodeError as e:
        return f"the tool call is not JSON ({e.msg}): {body[:200]}"
    if not isinstance(value, dict):
        return f"a tool call is a JSON object with a name and arguments, got: {body[:200]}"
    name = value.get("name", value.get("tool_name"))
    if not isinstance(name, str) or not name:
        return f"the tool call names no tool (\"name\"): {body[:200]}"
    args = value.get("arguments", {})
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except json.JSONDecodeError:
            return f"the arguments of {name} are not a JSON object: {args[:200]}"
    if not isinstance(args, dict):
        return f"the arguments of {name} are not a JSON object"
    return ToolCall(name, args)


def _object(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def tool_response(name: str, content: str) -> str:
    """A tool's answer as the Hermes format gives it back to the model."""
    return f"<tool_response>\n{json.dumps({'name': name, 'content': content})}\n</tool_response>"
