"""The Open Responses specification's published schema (vendored beside this module,
with its version) as validators for a Response and for each streamed event."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

SPEC_VERSION = "2026-04-24"
SPEC_PATH = Path(__file__).with_name(f"openresponses-{SPEC_VERSION}.json")
_URI = "urn:openresponses"
# This version of the specification names the reasoning text events `response.reasoning.*`;
# the official SDK (which refuses event types it does not know) names them
# `response.reasoning_text.*`, and so does spate. Such an event is checked against the
# specification's reasoning event schema under the specification's name (docs/api.md).
SDK_EVENT_NAMES = {
    "response.reasoning_text.delta": "response.reasoning.delta",
    "response.reasoning_text.done": "response.reasoning.done",
}


@cache
def _document() -> dict[str, Any]:
    document: dict[str, Any] = json.loads(SPEC_PATH.read_text())
    if document["info"]["version"] != SPEC_VERSION:
        raise ValueError(f"{SPEC_PATH.name} holds version {document['info']['version']}")
    return document


@cache
def _validator(schema_name: str) -> Draft202012Validator:
    registry: Registry[Any] = Registry().with_resource(
        _URI, Resource.from_contents(_document(), default_specification=DRAFT202012))
    return Draft202012Validator({"$ref": f"{_URI}#/components/schemas/{schema_name}"},
                                registry=registry)


@cache
def event_schemas() -> dict[str, str]:
    """Streamed event type -> the name of its schema, as the specification lists them."""
    content = _document()["paths"]["/responses"]["post"]["responses"]["200"]["content"]
    names = {}
    for ref in content["text/event-stream"]["schema"]["oneOf"]:
        name = ref["$ref"].rsplit("/", 1)[1]
        (event_type,) = _document()["components"]["schemas"][name]["properties"]["type"]["enum"]
        names[event_type] = name
    return names


def _errors(schema_name: str, instance: Any) -> list[str]:
    return [f"{'.'.join(map(str, error.absolute_path)) or '<root>'}: {error.message[:300]}"
            for error in _validator(schema_name).iter_errors(instance)]


def response_errors(response: Any) -> list[str]:
    """Why `response` is not a valid ResponseResource (empty when it is)."""
    return _errors("ResponseResource", response)


def event_errors(event: dict[str, Any]) -> list[str]:
    """Why `event` is not a valid streamed event of its type (empty when it is)."""
    kind = event.get("type")
    spec_kind = SDK_EVENT_NAMES.get(kind, kind)  # type: ignore[arg-type]
    schema = event_schemas().get(spec_kind)  # type: ignore[arg-type]
    if schema is None:
        return [f"the specification has no streamed event of type {kind!r}"]
    return _errors(schema, {**event, "type": spec_kind})


def compaction_errors(body: Any) -> list[str]:
    """What the schema finds wrong in a `POST /responses/compact` answer."""
    return _errors("CompactResource", body)


def socket_error_errors(event: Any) -> list[str]:
    """What the schema finds wrong in a WebSocket mode `error` event."""
    return _errors("WebSocketErrorEvent", event)
