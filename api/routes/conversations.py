"""Conversations (store on): create, read, update and delete a conversation, and list,
add, read and delete its items, in the official SDK's shapes. With the store off every
id is a 404 that says why; with API keys a conversation is its creator's alone."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query, Request

from api.deps import OwnerDep, SettingsDep, require_api_key
from api.errors import APIError, conversation_not_found
from api.lowering.item_ids import check_new_conversation_items, check_unique_item_ids
from api.lowering.stored_items import item_dicts
from api.schema.body import read_body
from api.schema.conversation import ConversationCreate, ConversationUpdate, ItemsCreate
from api.schema.request import INCLUDABLE
from api.state import require_store_for_conversation
from store import ItemPage, Store, StoredConversation

router = APIRouter(dependencies=[Depends(require_api_key)])

IncludeQuery = Annotated[list[str] | None, Query(alias="include[]")]


async def owned(store: Store, conversation_id: str, owner: str) -> StoredConversation:
    found = await store.get_conversation(conversation_id)
    if found is None or found.owner != owner:
        raise conversation_not_found(conversation_id)
    return found


def check_include(include: list[str] | None) -> None:
    for entry in include or []:
        if entry not in INCLUDABLE:
            raise APIError(400, f"'{entry}' cannot be included; supported: {', '.join(INCLUDABLE)}",
                           param="include", code="invalid_value")


def item_not_found(item_id: str) -> APIError:
    return APIError(404, f"Item with id '{item_id}' not found.", param="item_id",
                    code="not_found")


@router.post("/v1/conversations")
async def create(request: Request, owner: OwnerDep, settings: SettingsDep) -> dict[str, Any]:
    store = require_store_for_conversation(request, None)
    body = await read_body(request, ConversationCreate, settings.max_body_bytes)
    check_unique_item_ids(body.items or [], "items")
    return await store.create_conversation(
        metadata=body.metadata, items=item_dicts(body.items or []), owner=owner)


@router.get("/v1/conversations/{conversation_id}")
async def retrieve(request: Request, conversation_id: str, owner: OwnerDep) -> dict[str, Any]:
    store = require_store_for_conversation(request, conversation_id)
    return (await owned(store, conversation_id, owner)).conversation


@router.post("/v1/conversations/{conversation_id}")
async def update(
    request: Request, conversation_id: str, owner: OwnerDep, settings: SettingsDep
) -> dict[str, Any]:
    store = require_store_for_conversation(request, conversation_id)
    await owned(store, conversation_id, owner)
    body = await read_body(request, ConversationUpdate, settings.max_body_bytes)
    updated = await store.update_conversation(conversation_id, body.metadata or {})
    if updated is None:  # deleted meanwhile
        raise conversation_not_found(conversation_id)
    return updated


@router.delete("/v1/conversations/{conversation_id}")
async def delete(request: Request, conversation_id: str, owner: OwnerDep) -> dict[str, Any]:
    store = require_store_for_conversation(request, conversation_id)
    await owned(store, conversation_id, owner)
    await store.delete_conversation(conversation_id)
    return {"id": conversation_id, "object": "conversation.deleted", "deleted": True}


@router.get("/v1/conversations/{conversation_id}/items")
async def list_items(
    request: Request, conversation_id: str, owner: OwnerDep,
    after: str | None = None,
    limit: int = Query(default=20, ge=1, le=100),
    order: Literal["asc", "desc"] = "desc",
    include: IncludeQuery = None,
) -> dict[str, Any]:
    store = require_store_for_conversation(request, conversation_id)
    check_include(include)
    await owned(store, conversation_id, owner)
    try:
        page = await store.conversation_items(conversation_id, after=after, limit=limit,
                                              order=order)
    except KeyError:
        raise APIError(400, f"No item with id '{after}' in this conversation.",
                       param="after", code="invalid_value") from None
    if page is None:
        raise conversation_not_found(conversation_id)
    return page.list_object()


@router.post("/v1/conversations/{conversation_id}/items")
async def add_items(
    request: Request, conversation_id: str, owner: OwnerDep, settings: SettingsDep,
    include: IncludeQuery = None,
) -> dict[str, Any]:
    store = require_store_for_conversation(request, conversation_id)
    check_include(include)
    await owned(store, conversation_id, owner)
    body = await read_body(request, ItemsCreate, settings.max_body_bytes)
    await check_new_conversation_items(store, conversation_id, body.items)
    added = await store.add_conversation_items(conversation_id, item_dicts(body.items))
    if added is None:
        raise conversation_not_found(conversation_id)
    return ItemPage(added, has_more=False).list_object()


@router.get("/v1/conversations/{conversation_id}/items/{item_id}")
async def retrieve_item(
    request: Request, conversation_id: str, item_id: str, owner: OwnerDep,
    include: IncludeQuery = None,
) -> dict[str, Any]:
    store = require_store_for_conversation(request, conversation_id)
    check_include(include)
    await owned(store, conversation_id, owner)
    item = await store.get_conversation_item(conversation_id, item_id)
    if item is None:
        raise item_not_found(item_id)
    return item


@router.delete("/v1/conversations/{conversation_id}/items/{item_id}")
async def delete_item(
    request: Request, conversation_id: str, item_id: str, owner: OwnerDep
) -> dict[str, Any]:
    store = require_store_for_conversation(request, conversation_id)
    found = await owned(store, conversation_id, owner)
    if not await store.delete_conversation_item(conversation_id, item_id):
        raise item_not_found(item_id)
    return found.conversation
