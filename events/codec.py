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

_adapter: TypeAdapter[AnyEvent] = TypeAdapter(AnyEvent)

def _reasoning_ended_v1(payload: dict[str, Any]) -> dict[str, Any]:
    """v1 named a think block the model closed itself `cause: "model"`, which read like the
    model's name; v2 says `end_marker`."""
    if payload.get("cause") == "model":
        return {**payload, "cause": "end_marker"}
    return dict(payload)


# (type, version) -> function lifting a payload of that version to version + 1: the one
# place upcasters register. Add one entry per schema change; decode() applies them in order.
UPCASTERS: dict[tuple[str, int], Callable[[dict[str, Any]], dict[str, Any]]] = {
    ("reasoning.ended", 1): _reasoning_ended_v1,
}


class EventDecodeError(ValueError):
    """A payload that is not a spate event this code understands."""


def encode(event: Event) -> bytes:
    return event.model_dump_json().encode()


def decode(data: bytes | str | dict[str, Any]) -> AnyEvent:
    """The event in its current version. Payloads of the current version (every event
    written by this code) are parsed and validated in one pass; only one that fails that
    is parsed again and upcast, so the hot path pays nothing for old versions."""
    if not isinstance(data, dict):
        try:
            return _adapter.validate_json(data)
        except ValueError as error:
            first_error = error
        try:
            payload = json.loads(data)
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            raise EventDecodeError(f"not JSON: {error}") from error
        if not _upcastable(payload):
            raise EventDecodeError(str(first_error)) from first_error
    else:
        payload = data
    if not isinstance(payload, dict) or "type" not in payload:
        raise EventDecodeError("an event is a JSON object with a 'type'")
    try:
        return _adapter.validate_python(upcast(payload))
    except ValueError as error:
        raise EventDecodeError(str(error)) from error


def upcast(payload: dict[str, Any]) -> dict[str, Any]:
    """The payload lifted to its type's current version (unchanged when it is current)."""
    version = payload.get("v", 1)
    while (step := UPCASTERS.get((payload.get("type", ""), version))) is not None:
        payload = step(payload)
        version += 1
        payload["v"] = version
    return payload


def _upcastable(payload: Any) -> bool:
    return isinstance(payload, dict) and (payload.get("type"), payload.get("v", 1)) in UPCASTERS
