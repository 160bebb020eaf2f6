"""create_app(settings): the FastAPI application, with a lifespan that owns the journal."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager

from fastapi import FastAPI

from api.cache_router import CacheRouter
from api.errors import install_dependency_handlers, install_error_handlers
from api.guards.admission import Admission
from api.guards.drain import Drain, DrainGate
from api.guards.rate_limits import RateLimiter
from api.lowering.encrypted_content import ContentKeys
from api.metrics import ApiMetrics, RequestMetrics
from api.routes import (
    compact,
    conversations,
    health,
    input_tokens,
    metrics,
    models,
    playground,
    responses,
    responses_socket,
    stored_responses,
)
from api.schema.openapi import install_openapi
from api.settings import ApiSettings
from api.state import ApiState
from journal import Journal
from store.background_slots import BackgroundSlots
from store.projector import Projector
from store.redis_store import RedisStore

log = logging.getLogger("spate.api")

# Each step of a replica's shutdown (after the drain) gets this long: a dependency that
# does not answer must not keep the process from exiting.
SHUTDOWN_STEP_S = 5.0


async def _shut(what: str, step: Awaitable[None]) -> None:
    try:
        await asyncio.wait_for(step, SHUTDOWN_STEP_S)
    except Exception as error:  # a timeout included: exiting matters more now
        log.warning("shutdown: %s did not close within %.0f s: %r", what, SHUTDOWN_STEP_S,
                    error)


def create_app(settings: ApiSettings | None = None, drain: Drain | None = None) -> FastAPI:
    """The app; `drain`: the replica's drain when the server running the app starts it
    on SIGTERM (api/server.py), else the app makes its own."""
    settings = settings or ApiSettings()
    api_metrics = ApiMetrics()

    drain = drain if drain is not None else Drain(settings.drain_timeout_s)
    content_keys = ContentKeys.configured(settings.encryption_keys, settings.encryption_key_file)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        router = CacheRouter(settings.route_max_skew, settings.worker_ttl_s,
                             settings.route_tokens_per_skew) if settings.routing else None
        journal = Journal(settings, name="spate-api",
                          route=router.choose if router is not None else None,
                          route_deadline_s=settings.route_deadline_s)
        admission = Admission(
            settings.max_inflight, settings.key_max_open, settings.key_max_resumes
        )
        rate_limiter = RateLimiter(settings, journal.rate_limits)
        journal.start()
        routing = asyncio.create_task(router.start(journal)) if router is not None else None
        store = slots = projector = None
        if settings.store_url:
            store = RedisStore(
                settings.store_url, settings.store_ttl_s, pool_size=settings.store_pool_size,
                pool_wait_s=settings.store_pool_wait_s,
            )
            slots = BackgroundSlots(store.client, settings.background_slot_ttl_s)
            projector = Projector(journal, store, slots)
            # Without its loop the projector still catches a response up on request
            # (read-your-writes for what this replica served).
            if settings.store_projector:
                projector.start()
        app.state.api = ApiState(
            settings=settings, metrics=api_metrics, drain=drain, content_keys=content_keys,
            journal=journal, admission=admission, rate_limiter=rate_limiter, store=store,
            slots=slots, projector=projector, cache_router=router,
        )
        try:
            yield
        finally:
            if projector is not None:
                await _shut("the store's projection", projector.stop())
            if store is not None:
                await _shut("the response store", store.close())
            if routing is not None:
                routing.cancel()
            # What the last responses spent, written before the connection goes.
            await _shut("the rate limits' true-ups", rate_limiter.settled())
            await _shut("NATS", journal.close())

    app = FastAPI(title="spate", version="0.1.0", lifespan=lifespan)
    app.add_middleware(DrainGate, drain=drain)
    install_error_handlers(app)
    app.add_middleware(RequestMetrics, metrics=api_metrics)

    install_dependency_handlers(app)

    app.include_router(health.router)
    app.include_router(metrics.router)
    app.include_router(models.router)
    app.include_router(responses.router)
    app.include_router(responses_socket.router)
    app.include_router(input_tokens.router)
    app.include_router(compact.router)
    app.include_router(stored_responses.router)
    app.include_router(conversations.router)
    playground.install_playground(app)
    install_openapi(app)
    return app
