"""How a failing dependency (NATS, the response store) reaches a client: a 503 naming the
dependency and nothing else. Its address and its driver's message go to the log only:
they describe the deployment, which is no client's business."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from api.errors import APIError
from journal import JournalUnavailable
from store import StoreError

log = logging.getLogger("spate.api")

BUS_UNAVAILABLE = "The message bus (NATS) is unavailable; try again shortly."
STORE_UNAVAILABLE = "The response store is unavailable; try again shortly."


def bus_unavailable(error: Exception) -> str:
    """The client's message for a NATS failure, after logging what it was."""
    log.warning("the message bus failed: %s", error)
    return BUS_UNAVAILABLE


def install_dependency_handlers(app: FastAPI) -> None:
    @app.exception_handler(JournalUnavailable)
    async def _bus_unavailable(_: Request, error: JournalUnavailable) -> JSONResponse:
        return APIError(503, bus_unavailable(error), code="bus_unavailable").response()

    @app.exception_handler(StoreError)
    async def _store_unavailable(_: Request, error: StoreError) -> JSONResponse:
        # Unreachable, or refusing (e.g. a Redis in protected mode or out of memory): the
        # store is a dependency that failed, never this server's 500.
        log.warning("the response store failed: %s", error)
        return APIError(503, STORE_UNAVAILABLE, code="store_unavailable").response()
