"""What a replica's handlers reach: the objects create_app and its lifespan own, as one
typed record on the app (`api_state`), and the store as the routes see it: present when
SPATE_STORE_URL is set, and the answers a client gets when it is not."""

from __future__ import annotations

from dataclasses import dataclass

from starlette.requests import HTTPConnection

from api.cache_router import CacheRouter
from api.errors import APIError, conversation_not_found, response_not_found
from api.guards.admission import Admission
from api.guards.drain import Drain
from api.guards.rate_limits import RateLimiter
from api.lowering.encrypted_content import ContentKeys
from api.metrics import ApiMetrics
from api.schema.fields import STORE_ENV
from api.settings import ApiSettings
from journal import Journal
from store import Store
from store.background_slots import BackgroundSlots
from store.projector import Projector


@dataclass(frozen=True, slots=True)
class ApiState:
    """Built by the lifespan, held as `app.state.api`; the drain and the content keys are
    made with the app, before it (the drain's middleware and the server's signal handler
    hold the drain from the start)."""

    settings: ApiSettings
    metrics: ApiMetrics
    drain: Drain
    content_keys: ContentKeys
    journal: Journal
    admission: Admission
    rate_limiter: RateLimiter
    # With the store on (SPATE_STORE_URL) these three; without it, None.
    store: Store | None = None
    slots: BackgroundSlots | None = None
    projector: Projector | None = None
    # With routing on (SPATE_ROUTING).
    cache_router: CacheRouter | None = None


def api_state(connection: HTTPConnection) -> ApiState:
    """The app's ApiState, from a request or a WebSocket."""
    state: ApiState = connection.app.state.api
    return state


def store_or_none(connection: HTTPConnection) -> Store | None:
    return api_state(connection).store


def projector_of(connection: HTTPConnection) -> Projector:
    """The store's projection; only a stored response asks for it, so the store is on."""
    projector = api_state(connection).projector
    if projector is None:
        raise RuntimeError("the store is off: there is no projection to ask")
    return projector


def require_store_for_conversation(connection: HTTPConnection, conversation_id: str | None) -> Store:
    """The store, or the 404 a conversation route answers with it off (creating one
    too: there is nowhere to keep it)."""
    store = store_or_none(connection)
    if store is None:
        why = f"Conversations are not stored: set {STORE_ENV} to enable the response store."
        if conversation_id is None:
            raise APIError(404, why, code="not_found")
        raise conversation_not_found(conversation_id, why=why)
    return store


def require_store_for_id(connection: HTTPConnection, response_id: str) -> Store:
    store = store_or_none(connection)
    if store is None:
        raise response_not_found(
            response_id,
            why=f"Responses are not stored: set {STORE_ENV} to enable the response store.",
        )
    return store
