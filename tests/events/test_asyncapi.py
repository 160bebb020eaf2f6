"""docs/asyncapi.yaml is what the event models say: regenerate it when they change."""

from __future__ import annotations

from typing import get_args

import yaml

from events import AnyEvent
from events.asyncapi import DEFAULT_PATH, asyncapi_document, render_asyncapi


def test_the_committed_document_is_current() -> None:
    assert DEFAULT_PATH.read_text() == render_asyncapi(), (
        "docs/asyncapi.yaml is stale: run `spate events asyncapi` (or python -m events.asyncapi)"
    )


def test_every_event_type_has_a_message_with_its_schema() -> None:
    document = yaml.safe_load(render_asyncapi())
    assert document["asyncapi"] == "3.0.0"
    (union, _) = get_args(AnyEvent)
    messages = document["components"]["messages"]
    schemas = document["components"]["schemas"]
    for model in get_args(union):
        event_type = model.model_fields["type"].default
        message = messages[event_type]
        assert message["payload"] == {"$ref": f"#/components/schemas/{model.__name__}"}
        schema = schemas[model.__name__]
        assert schema["properties"]["type"]["const"] == event_type
        assert schema["properties"]["v"]["const"] == model.model_fields["v"].default
        assert "Nats-Msg-Id" in message["headers"]["required"]
    # Every reference points at something the document defines.
    refs = _refs(document)
    assert refs
    for ref in refs:
        node = document
        for part in ref.removeprefix("#/").split("/"):
            node = node[part]


def test_the_channels_name_the_streams() -> None:
    channels = asyncapi_document()["channels"]
    assert channels["requests"]["address"] == "spate.requests.{model}"
    assert channels["events"]["address"] == "spate.events.{response_id}"
    assert channels["events"]["x-spate-stream"] == "SPATE_EVENTS"


def _refs(node: object) -> list[str]:
    if isinstance(node, dict):
        found = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
        return found + [ref for value in node.values() for ref in _refs(value)]
    if isinstance(node, list):
        return [ref for value in node for ref in _refs(value)]
    return []
