"""How a failing dependency (NATS, the response store) reaches a client: a 503 naming the
dependency and nothing else; its address and its driver's message go to the log only:
they describe the deployment, which is no client's business. A request event too large
for NATS and a client-chosen id claimed first get their own 413 and 409."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from api.errors import APIError, request_id_taken
from journal import JournalUnavailable, PayloadTooLarge, ResponseIdTaken
from store import StoreError

log = logging.getLogger("spate.api")

BUS_UNAVAILABLE = "The message bus (NATS) is unavailable; try again shortly."
STORE_UNAVAILABLE = "The response store is unavailable; try again shortly."


def bus_unavailable(error: Exception) -> str:
    """The client's message for a NATS failure, after logging what it was."""
    log.warning("the message bus failed: %s", error)
    return BUS_UNAVAILABLE


# What a failure under a request reaches a client as, over HTTP or on a WebSocket.
DEPENDENCY_ERRORS = (JournalUnavailable, StoreError, PayloadTooLarge, ResponseIdTaken)


def dependency_error(error: Exception) -> APIError:
    """The error a client gets for one of DEPENDENCY_ERRORS."""
    if isinstance(error, PayloadTooLarge):
        # Under SPATE_MAX_BODY_BYTES but over what NATS takes in one message.
        return APIError(413, f"The request is too large: as an event it is {error.size} bytes, "
                        f"and this server takes at most {error.limit}.", code="request_too_large")
    if isinstance(error, ResponseIdTaken):
        # Another request claimed the log of this client-chosen id first.
        return request_id_taken(error.response_id)
    if isinstance(error, StoreError):
        # Unreachable, or refusing (e.g. a Redis in protected mode or out of memory): the
        # store is a dependency that failed, never this server's 500.
        log.warning("the response store failed: %s", error)
        return APIError(503, STORE_UNAVAILABLE, code="store_unavailable")
    return APIError(503, bus_unavailable(error), code="bus_unavailable")


def install_dependency_handlers(app: FastAPI) -> None:
    async def _failed(_: Request, error: Exception) -> JSONResponse:
        return dependency_error(error).response()

    for failure in DEPENDENCY_ERRORS:
        app.add_exception_handler(failure, _failed)
