"""The bodies of the conversation routes as spate accepts them (pydantic, strict types)."""

from __future__ import annotations

from typing import Any

from pydantic import Field, model_validator

from api.schema.input_items import InputItem, refuse_unknown_item_types
from api.schema.model_base import FieldRejected, StrictModel

# OpenAI adds at most this many items to a conversation in one call.
MAX_ITEMS_PER_CALL = 20


def _object_body(body: Any) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise FieldRejected("", "The request body must be a JSON object.")
    refuse_unknown_item_types(body.get("items"), field="items")
    refuse_outside_input(body.get("items"), field="items")
    return body


def refuse_outside_input(items: Any, field: str) -> None:
    """A 400 for a file, an image or sealed reasoning in items kept outside a response's
    input (a conversation's): a file is read into text, and sealed reasoning opened, only
    as a response's input, where the model that will read them is known."""
    if not isinstance(items, list):
        return
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            continue
        if item.get("type") == "reasoning" and item.get("encrypted_content") is not None:
            raise FieldRejected(f"{field}[{index}].encrypted_content",
                                "Encrypted reasoning is opened only in a response's input; "
                                "send it there.")
        content = item.get("content")
        for part_index, part in enumerate(content if isinstance(content, list) else []):
            if isinstance(part, dict) and part.get("type") in ("input_file", "input_image"):
                raise FieldRejected(
                    f"{field}[{index}].content[{part_index}]",
                    f"An {part['type']} part is taken only in a response's input (a file is "
                    "read into text there, and the model decides about images); send it there.")


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
