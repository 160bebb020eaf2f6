"""The responses a WebSocket connection holds in memory for `previous_response_id`, so
a chain goes on with `store: false`: each held response's whole history (the earlier
turns, its input, its output), bounded in bytes, the least recently used dropped first; and the check that a
continuation's tool outputs answer calls of the chain it names."""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any


def unanswered_output(history: list[dict[str, Any]], items: Sequence[Any]) -> tuple[int, str] | None:
    """(index, call_id) of the first `function_call_output` in a continuation's input that
    answers no call of its chain: none in the held history, none earlier in the input.
    Such a turn does not fit the state the connection holds, so it fails (OpenAI's
    WebSocket mode refuses it) instead of generating from a history that makes no sense."""
    calls = {item.get("call_id") for item in history
             if str(item.get("type", "")).endswith("_call") and item.get("call_id")}
    for index, item in enumerate(items):
        call_id = getattr(item, "call_id", None)
        kind = getattr(item, "type", None)
        if kind == "function_call_output" and call_id not in calls:
            return index, str(call_id)
        if call_id and str(kind).endswith("_call"):
            calls.add(call_id)
    return None


def size_of(items: list[dict[str, Any]]) -> int:
    """What a history costs against the bound: its bytes as JSON."""
    return len(json.dumps(items, separators=(",", ":")))


class HeldChains:
    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.bytes = 0
        self._held: OrderedDict[str, tuple[list[dict[str, Any]], int]] = OrderedDict()

    def __contains__(self, response_id: str) -> bool:
        return response_id in self._held

    def __len__(self) -> int:
        return len(self._held)

    def hold(self, response_id: str, items: list[dict[str, Any]]) -> bool:
        """Keep a finished response's history; False when it alone is over the bound (a
        chain from it then needs the store, or the client sends the history again)."""
        size = size_of(items)
        if size > self.max_bytes:
            return False
        self.drop(response_id)
        while self._held and self.bytes + size > self.max_bytes:
            _, (_, freed) = self._held.popitem(last=False)
            self.bytes -= freed
        self._held[response_id] = (items, size)
        self.bytes += size
        return True

    def history(self, response_id: str) -> list[dict[str, Any]] | None:
        """The items a turn after `response_id` builds on, or None when not held."""
        held = self._held.get(response_id)
        if held is None:
            return None
        self._held.move_to_end(response_id)
        return held[0]

    def drop(self, response_id: str) -> None:
        held = self._held.pop(response_id, None)
        if held is not None:
            self.bytes -= held[1]
