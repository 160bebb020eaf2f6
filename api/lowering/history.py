"""Earlier turns a request builds on: `previous_response_id` (the chain's input and
output items) or `conversation` (the conversation's items), read from the store."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from api.errors import APIError, conversation_not_found, response_not_found
from api.lowering.accept import Recorded
from api.lowering.stored_items import as_input, input_item_dicts
from api.schema.fields import STORE_ENV
from api.schema.input_items import ItemReference, MessageItem
from api.schema.request import ResponsesRequest
from store import ItemPage, Store

PAGE = 100


@dataclass(slots=True)
class Context:
    items: list[dict[str, Any]] = field(default_factory=list)
    conversation_id: str | None = None


def conversation_id_of(request: ResponsesRequest) -> str | None:
    conversation = request.conversation
    if conversation is None or isinstance(conversation, str):
        return conversation
    return conversation.id


async def context_of(store: Store, request: ResponsesRequest, owner: str) -> Context:
    conversation_id = conversation_id_of(request)
    if request.previous_response_id is not None and conversation_id is not None:
        raise APIError(400, "Use either 'previous_response_id' or 'conversation', not both.",
                       param="conversation", code="invalid_value")
    if request.previous_response_id is not None:
        return Context(await _chain_items(store, request.previous_response_id, owner))
    if conversation_id is not None:
        stored = await store.get_conversation(conversation_id)
        if stored is None or stored.owner != owner:
            raise conversation_not_found(conversation_id, param="conversation")
        items = await _all_items(lambda after: store.conversation_items(
            conversation_id, after=after, limit=PAGE, order="asc"))
        return Context(items, conversation_id)
    return Context()


async def _chain_items(store: Store, response_id: str, owner: str) -> list[dict[str, Any]]:
    stored = await store.get_response(response_id)
    if stored is None or stored.owner != owner:
        raise response_not_found(response_id, param="previous_response_id")
    given = await _all_items(lambda after: store.input_items(
        response_id, after=after, limit=PAGE, order="asc"))
    return [*given, *stored.response.get("output", [])]


async def _all_items(read: Any) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    after = None
    while True:
        page: ItemPage | None = await read(after)
        if page is None:
            return items
        items.extend(page.data)
        if not page.has_more or not page.data:
            return items
        after = page.last_id


def with_context(request: ResponsesRequest, context: Context) -> ResponsesRequest:
    """The request with the earlier turns before its own input."""
    if not context.items:
        return request
    own = request.input if isinstance(request.input, list) else [
        MessageItem(role="user", content=request.input)]
    return request.model_copy(update={"input": [*as_input(context.items), *own]})


def recorded_of(
    request: ResponsesRequest, context: Context, stored: bool, chained: bool,
    compaction: dict[str, Any] | None,
) -> Recorded:
    """What the request event records of the store and the earlier turns: as the store
    projects it when `stored`; else, for a chain the caller holds (`chained`), the
    `previous_response_id` the Response echoes."""
    if not stored:
        echo = ({"previous_response_id": request.previous_response_id}
                if chained and request.previous_response_id is not None else {})
        return Recorded(echo=echo, compaction=compaction)
    keep = request.store is not False
    stored_echo: dict[str, Any] = {"store": keep, "background": bool(request.background)}
    if request.previous_response_id is not None:
        stored_echo["previous_response_id"] = request.previous_response_id
    if context.conversation_id is not None:
        stored_echo["conversation"] = {"id": context.conversation_id}
    own = input_item_dicts(request) if keep else []
    return Recorded(
        store=keep, echo=stored_echo,
        input_items=tuple([*context.items, *own]) if keep else (),
        new_input_from=len(context.items) if keep else 0,
        conversation_id=context.conversation_id,
        background=bool(request.background), compaction=compaction,
    )


async def resolved_references(
    store: Store | None, request: ResponsesRequest, owner: str
) -> ResponsesRequest:
    """The request with each `item_reference` input replaced by the stored item it names
    (an input or output item of an earlier response of the same owner)."""
    if isinstance(request.input, str) or not any(
        isinstance(item, ItemReference) for item in request.input
    ):
        return request
    resolved: list[Any] = []
    for index, item in enumerate(request.input):
        if not isinstance(item, ItemReference):
            resolved.append(item)
            continue
        if store is None:
            raise APIError(
                400, f"An item_reference input needs the response store; set {STORE_ENV} "
                "to enable it.", param=f"input[{index}]", code="invalid_value")
        found = await store.get_item(item.id, owner)
        if found is None:
            raise APIError(404, f"Item with id '{item.id}' not found.",
                           param=f"input[{index}].id", code="not_found")
        resolved.extend(as_input([found]))
    return request.model_copy(update={"input": resolved})
