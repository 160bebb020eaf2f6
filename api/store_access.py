"""The store as the routes see it: present when SPATE_STORE_URL is set, and the answers a
client gets when it is not (404 for stored ids, 400 for fields that need it)."""

from __future__ import annotations

from fastapi import Request
from starlette.requests import HTTPConnection

from api.errors import APIError, response_not_found
from api.schema.fields import STORE_ENV, store_field_message
from store import Store
from store.projector import Projector


def store_or_none(request: HTTPConnection) -> Store | None:
    return getattr(request.app.state, "store", None)


def projector_of(request: Request) -> Projector:
    projector: Projector = request.app.state.projector
    return projector


def conversation_not_found(
    conversation_id: str, param: str = "conversation_id", store_off: bool = False
) -> APIError:
    message = f"Conversation with id '{conversation_id}' not found."
    if store_off:
        message += f" Conversations are not stored: set {STORE_ENV} to enable the response store."
    return APIError(404, message, param=param, code="not_found")


def require_store_for_conversation(request: Request, conversation_id: str | None) -> Store:
    """The store, or the 404 a conversation route answers with it off (creating one
    too: there is nowhere to keep it)."""
    store = store_or_none(request)
    if store is None:
        if conversation_id is None:
            raise APIError(404, f"Conversations are not stored: set {STORE_ENV} to enable "
                           "the response store.", code="not_found")
        raise conversation_not_found(conversation_id, store_off=True)
    return store


def require_store_for_id(request: Request, response_id: str) -> Store:
    store = store_or_none(request)
    if store is None:
        raise response_not_found(
            response_id,
            why=f"Responses are not stored: set {STORE_ENV} to enable the response store.",
        )
    return store


def require_store_for_field(request: HTTPConnection, field: str) -> Store:
    store = store_or_none(request)
    if store is None:
        raise APIError(400, store_field_message(field), param=field, code="invalid_value")
    return store
