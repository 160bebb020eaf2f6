"""JSON codec for events: one discriminated union, with upcasting of older versions."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Annotated, Any

from pydantic import Field, TypeAdapter

from events.envelope import Event
from events.generation import (
    CancelRequested,
    GenerationFailed,
    GenerationFinished,
    GenerationStarted,
    ReasoningEnded,
    TokensGenerated,
    ToolCallEnded,
    ToolCallStarted,
)
from events.request import RequestAccepted

AnyEvent = Annotated[
    RequestAccepted | GenerationStarted | TokensGenerated | ReasoningEnded | ToolCallStarted
    | ToolCallEnded | GenerationFinished | GenerationFailed | CancelRequested,
    Field(discriminator="type"),
]

_adapter: TypeAdapter[Any] = TypeAdapter(AnyEvent)

# (type, version) -> function lifting a payload of that version to version + 1.
# Add one entry per schema change; decode() applies them in order.
UPCASTERS: dict[tuple[str, int], Callable[[dict[str, Any]], dict[str, Any]]] = {}


class EventDecodeError(ValueError):
    """A payload that is not a spate event this code understands."""


def encode(event: Event) -> bytes:
    return event.model_dump_json().encode()


def decode(data: bytes | str | dict[str, Any]) -> Any:
    if not UPCASTERS and not isinstance(data, dict):
        # The hot path (a token event per decode step): parse and validate in one pass.
        try:
            return _adapter.validate_json(data)
        except ValueError as error:
            raise EventDecodeError(str(error)) from error
    try:
        payload = data if isinstance(data, dict) else json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise EventDecodeError(f"not JSON: {error}") from error
    if not isinstance(payload, dict) or "type" not in payload:
        raise EventDecodeError("an event is a JSON object with a 'type'")
    version = payload.get("v", 1)
    while (upcast := UPCASTERS.get((payload["type"], version))) is not None:
        payload = upcast(payload)
        version += 1
        payload["v"] = version
    try:
        return _adapter.validate_python(payload)
    except ValueError as error:
        raise EventDecodeError(str(error)) from error
