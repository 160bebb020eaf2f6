"""Item ids and the conversation object: the small facts every backend shares."""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterable, Mapping
from typing import Any

from store.records import JSONObject

# The id prefixes OpenAI uses for each item type; any other type gets "item".
_ID_PREFIX = {
    "message": "msg",
    "function_call": "fc",
    "function_call_output": "fco",
    "reasoning": "rs",
}

MAX_PAGE_LIMIT = 100


def new_item_id(item_type: str) -> str:
    return f"{_ID_PREFIX.get(item_type, 'item')}_{secrets.token_hex(24)}"


def new_conversation_id() -> str:
    return f"conv_{secrets.token_hex(24)}"


def with_ids(items: Iterable[Mapping[str, Any]]) -> list[JSONObject]:
    """The items, each with an `id`: a given one is kept (so a replay names an item as
    the first write did, and the store can skip it), a missing one is made up."""
    stored: list[JSONObject] = []
    seen: set[str] = set()
    for item in items:
        item = dict(item)
        item_id = item.get("id")
        if item_id is None:
            item_id = item["id"] = new_item_id(str(item.get("type", "message")))
        if not isinstance(item_id, str) or not item_id:
            raise ValueError(f"an item id is a non-empty string, not {item_id!r}")
        if item_id in seen:
            raise ValueError(f"item id {item_id!r} appears twice")
        seen.add(item_id)
        stored.append(item)
    return stored


def item_args(items: list[JSONObject]) -> list[str]:
    """id, JSON, id, JSON, ...: the flat argument list the item scripts take."""
    args: list[str] = []
    for item in items:
        args += [item["id"], dump(item)]
    return args


def conversation_object(
    conversation_id: str, created_at: int, metadata: Mapping[str, str] | None
) -> JSONObject:
    return {
        "id": conversation_id,
        "object": "conversation",
        "created_at": created_at,
        "metadata": dict(metadata or {}),
    }


def check_page(limit: int, order: str) -> None:
    if not 1 <= limit <= MAX_PAGE_LIMIT:
        raise ValueError(f"limit must be between 1 and {MAX_PAGE_LIMIT}, not {limit}")
    if order not in ("asc", "desc"):
        raise ValueError(f"order must be 'asc' or 'desc', not {order!r}")


def dump(value: Any) -> str:
    # Compact and key-order preserving: what was stored is what a reader gets back.
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
