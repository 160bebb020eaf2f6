"""The bodies of the conversation routes as spate accepts them (pydantic, strict types)."""

from __future__ import annotations

from typing import Any

from pydantic import Field, model_validator

from api.input_files import refuse_outside_input
from api.input_items import InputItem, refuse_unknown_item_types
from api.model_base import FieldRejected, StrictModel

# OpenAI adds at most this many items to a conversation in one call.
MAX_ITEMS_PER_CALL = 20


def _object_body(body: Any) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise FieldRejected("", "The request body must be a JSON object.")
    refuse_unknown_item_types(body.get("items"), field="items")
    refuse_outside_input(body.get("items"), field="items")
    return body


class ConversationCreate(StrictModel):
    metadata: dict[str, str] | None = None
    items: list[InputItem] | None = Field(default=None, max_length=MAX_ITEMS_PER_CALL)

    @model_validator(mode="before")
    @classmethod
    def _checked(cls, body: Any) -> Any:
        return _object_body(body)


class ConversationUpdate(StrictModel):
    # The SDK always sends it; null clears the metadata.
    metadata: dict[str, str] | None

    @model_validator(mode="before")
    @classmethod
    def _checked(cls, body: Any) -> Any:
        return _object_body(body)


class ItemsCreate(StrictModel):
    items: list[InputItem] = Field(min_length=1, max_length=MAX_ITEMS_PER_CALL)

    @model_validator(mode="before")
    @classmethod
    def _checked(cls, body: Any) -> Any:
        return _object_body(body)
