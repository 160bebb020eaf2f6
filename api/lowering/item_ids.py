"""Item ids are unique where items are listed together: within one request's input, and
across a conversation or a `previous_response_id` chain and the input added to it. A
repeat is the client's 400 naming the field, found before anything is published: the
store lists items by id, so a repeat could not be stored."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from api.errors import APIError
from store import Store


def check_unique_item_ids(
    items: Sequence[Any], field: str, earlier: Iterable[dict[str, Any]] = (), where: str = "",
) -> None:
    """A 400 for the first item of `items` (validated input items; `field` is their
    request field) whose id repeats one before it or one of `earlier` (stored item
    objects, described by `where`: "the conversation 'conv_1'", say)."""
    seen: dict[str, str | None] = {item["id"]: None for item in earlier if item.get("id")}
    for index, item in enumerate(items):
        item_id = getattr(item, "id", None)
        if item_id is None:
            continue
        param = f"{field}[{index}].id"
        if item_id in seen:
            first = seen[item_id]
            already = f"'{first}'" if first is not None else f"an item of {where}"
            raise APIError(400, f"Duplicate item id '{item_id}' in '{param}': it is already "
                           f"{already}. Item ids must be unique.", param=param,
                           code="invalid_value")
        seen[item_id] = param


async def check_new_conversation_items(
    store: Store, conversation_id: str, items: Sequence[Any], field: str = "items"
) -> None:
    """`check_unique_item_ids` for items added to a stored conversation: each id is
    looked up in it (a call adds at most MAX_ITEMS_PER_CALL)."""
    check_unique_item_ids(items, field)
    for index, item in enumerate(items):
        item_id = getattr(item, "id", None)
        if item_id is not None and await store.get_conversation_item(conversation_id, item_id):
            param = f"{field}[{index}].id"
            raise APIError(400, f"Duplicate item id '{item_id}' in '{param}': it is already an "
                           f"item of the conversation '{conversation_id}'. Item ids must be "
                           "unique.", param=param, code="invalid_value")
