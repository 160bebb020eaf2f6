"""create_app(settings): the FastAPI application, with a lifespan that owns the bus."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from api.admission import Admission
from api.bus import Bus, BusUnavailable
from api.errors import APIError, install_error_handlers
from api.routes import health, models, responses, stored_responses
from api.settings import ApiSettings


def create_app(settings: ApiSettings | None = None) -> FastAPI:
    settings = settings or ApiSettings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        bus = Bus(settings)
        app.state.settings = settings
        app.state.bus = bus
        app.state.admission = Admission(settings.max_inflight)
        await bus.start()
        try:
            yield
        finally:
            await bus.close()

    app = FastAPI(title="spate", version="0.1.0", lifespan=lifespan)
    install_error_handlers(app)

    @app.exception_handler(BusUnavailable)
    async def _bus_unavailable(_: Request, error: BusUnavailable) -> JSONResponse:
        return APIError(503, str(error), code="bus_unavailable").response()

    app.include_router(health.router)
    app.include_router(models.router)
    app.include_router(responses.router)
    app.include_router(stored_responses.router)
    return app
