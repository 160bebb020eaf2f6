"""The items a stored response was given, in the Responses API's item shapes with ids,
and back: a previous response's or a conversation's items become input again."""

from __future__ import annotations

import secrets
from typing import Any

from pydantic import TypeAdapter

from api.schema.input_items import (
    CompactionItem,
    FunctionCallItem,
    FunctionCallOutputItem,
    InputItem,
    MessageItem,
    ReasoningItem,
    TextPart,
)
from api.schema.request import ResponsesRequest
from api.schema.tool_items import (
    TOOL_ITEM_ID_PREFIX,
    LocalShellCallOutputItem,
    ToolCallItem,
    ToolOutputItem,
)

_ITEMS: TypeAdapter[list[Any]] = TypeAdapter(list[InputItem])


def _new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(12)}"


def input_item_dicts(request: ResponsesRequest) -> list[dict[str, Any]]:
    """The request's own input as item objects the official SDK parses: content always
    a list of parts, every item with an id and a status."""
    if isinstance(request.input, str):
        return [_message("user", [{"type": "input_text", "text": request.input}], None)]
    return item_dicts(request.input)


def item_dicts(items: list[Any]) -> list[dict[str, Any]]:
    """Validated input items (`InputItem`s) as stored item objects, ids filled in."""
    return [_item_dict(item) for item in items]


def _item_dict(item: Any) -> dict[str, Any]:
    if isinstance(item, MessageItem):
        kind = "output_text" if item.role == "assistant" else "input_text"
        parts: list[dict[str, Any]]
        if isinstance(item.content, str):
            parts = [{"type": kind, "text": item.content}]
        else:
            parts = [{"type": part.type, "text": part.text} if isinstance(part, TextPart)
                     else part.model_dump(exclude_none=True) for part in item.content]
        if item.role == "assistant":
            parts = [{**part, "type": "output_text", "annotations": []} for part in parts]
        return _message(item.role, parts, item.id)
    if isinstance(item, FunctionCallItem):
        data = item.model_dump(exclude_none=True)
        return {**data, "id": item.id or _new_id("fc"), "status": item.status or "completed"}
    if isinstance(item, FunctionCallOutputItem):
        return {"type": "function_call_output", "id": item.id or _new_id("fco"),
                "call_id": item.call_id, "output": item.text(),
                "status": item.status or "completed"}
    if isinstance(item, ReasoningItem):
        return {"type": "reasoning", "id": item.id or _new_id("rs"),
                "summary": [part.model_dump() for part in item.summary],
                "content": [part.model_dump() for part in item.content or []]}
    if isinstance(item, LocalShellCallOutputItem):
        return {"type": item.type, "id": _new_id(TOOL_ITEM_ID_PREFIX[item.type]),
                "call_id": item.answered(), "output": item.output,
                "status": item.status or "completed"}
    if isinstance(item, ToolCallItem | ToolOutputItem):
        data = item.model_dump(exclude_none=True, by_alias=True)
        return {**data, "id": getattr(item, "id", None) or _new_id(TOOL_ITEM_ID_PREFIX[item.type])}
    if isinstance(item, CompactionItem):
        return {"type": "compaction", "id": item.id or _new_id("cmp"),
                "encrypted_content": item.encrypted_content}
    raise TypeError(f"not an input item: {item!r}")


def _message(role: str, parts: list[dict[str, Any]], item_id: str | None) -> dict[str, Any]:
    return {"type": "message", "id": item_id or _new_id("msg"), "role": role,
            "content": parts, "status": "completed"}


def as_input(items: list[dict[str, Any]]) -> list[Any]:
    """Stored item objects (input or output) as input items of a new request."""
    return _ITEMS.validate_python([_inputable(item) for item in items])


def _inputable(item: dict[str, Any]) -> dict[str, Any]:
    """Output items carry fields input items do not take (logprobs on text parts)."""
    if item.get("type") == "message":
        parts = [{"type": part["type"], "text": part.get("text", "")}
                 for part in item.get("content", [])]
        return {"type": "message", "role": item["role"], "content": parts, "id": item.get("id")}
    if item.get("type") == "reasoning":
        return {"type": "reasoning", "id": item.get("id"), "summary": item.get("summary", []),
                "content": item.get("content") or []}
    return item
