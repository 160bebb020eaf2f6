"""Which tool-call markup a chat template writes: found by rendering an assistant turn with
one call and reading what the template wrote for it. The markups themselves (parsing,
grammar) live in workers/output/tool_call_formats.py."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

HERMES = "hermes"
LLAMA3_JSON = "llama3_json"
MISTRAL = "mistral"

_PROBE_NAME = "probe_function"
_PROBE_ARGUMENTS = {"probe_argument": 1}

Render = Callable[[list[dict[str, Any]], list[dict[str, Any]]], str]


def detect_tool_call_format(render: Render) -> str | None:
    """The format a template writes an assistant's call in. `render(messages, tools)`
    renders a conversation; None when the template writes no call of a known shape."""
    tool: dict[str, Any] = {"type": "function", "function": {"name": _PROBE_NAME, "parameters": {
        "type": "object", "properties": {"probe_argument": {"type": "integer"}}}}}
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "Call it."},
        {"role": "assistant", "content": "", "tool_calls": [{
            "id": "a1b2c3d4e", "type": "function",
            "function": {"name": _PROBE_NAME, "arguments": _PROBE_ARGUMENTS}}]},
        {"role": "tool", "content": "done", "tool_call_id": "a1b2c3d4e"},
    ]
    try:
        text = render(messages, [tool])
    except ValueError:
        return None
    # Only the turns after the question: the tools' definitions also hold a name.
    text = text[text.rfind("Call it."):]
    if f'<tool_call>\n{{"name": "{_PROBE_NAME}"' in text:
        return HERMES
    # Mistral Small 3.2 writes the call's id between name and arguments.
    if any(f"[TOOL_CALLS]{_PROBE_NAME}{tag}" in text for tag in ("[ARGS]", "[CALL_ID]")):
        return MISTRAL
    if f'{{"name": "{_PROBE_NAME}", "parameters": ' in text:
        return LLAMA3_JSON
    return None
