"""OpenAI-shaped error bodies, and the handlers that make every failure one of them: a
failing dependency (NATS, the store) is a 503 that names it and says nothing more."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from events.request_settings import FIXED_MESSAGE_ERROR
from journal import JournalUnavailable, PayloadTooLarge, ResponseIdTaken
from store import StoreError

log = logging.getLogger("spate.api")

# OpenAI's API types an unknown model, response or route as a bad request too.
_TYPE_BY_STATUS = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "invalid_request_error",
    405: "invalid_request_error",
    409: "invalid_request_error",
    413: "invalid_request_error",
    431: "invalid_request_error",
    429: "rate_limit_error",
    503: "service_unavailable_error",
}

# Failures that say the request itself was bad, or that nothing could serve it: with no
# output yet, a plain HTTP client gets them as that status rather than a 200 carrying a
# failed Response (and a token count refused by a worker gets them too).
ERROR_STATUS = {
    "context_length_exceeded": 400,
    "invalid_prompt": 400,
    "invalid_value": 400,
    "model_unavailable": 503,
    "bus_unavailable": 503,
}


class APIError(Exception):
    def __init__(
        self,
        status: int,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.headers = headers

    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": _TYPE_BY_STATUS.get(self.status, "server_error"),
                "param": self.param,
                "code": self.code,
            }
        }

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status, headers=self.headers)


def request_id_taken(request_id: str) -> APIError:
    """A `request_id` some response already has, whoever's it is: response ids are one
    namespace across API keys, so the answer says only that the id is taken."""
    return APIError(409, f"The request_id '{request_id}' is already in use; choose another.",
                    param="request_id", code="request_id_in_use")


def response_not_found(response_id: str, *, param: str = "response_id", why: str = "") -> APIError:
    """The 404 for a response id nothing knows, in OpenAI's words; `why` adds a sentence
    (the store being off, say)."""
    message = f"Response with id '{response_id}' not found."
    return APIError(404, f"{message} {why}" if why else message, param=param, code="not_found")


def conversation_not_found(
    conversation_id: str, *, param: str = "conversation_id", why: str = ""
) -> APIError:
    """The 404 for a conversation id nothing knows; `why` adds a sentence (the store being
    off, say)."""
    message = f"Conversation with id '{conversation_id}' not found."
    return APIError(404, f"{message} {why}" if why else message, param=param, code="not_found")


def param_path(loc: tuple[Any, ...]) -> str:
    """('body', 'input', 0, 'content') -> 'input[0].content', as OpenAI names params."""
    path = ""
    # FastAPI starts a location with where the value came from; OpenAI leaves it out.
    if loc and loc[0] in ("body", "query", "path", "header"):
        loc = loc[1:]
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif _is_union_tag(str(part)):
            continue
        else:
            path += f".{part}" if path else str(part)
    return path


_SCALAR_TAGS = frozenset({"str", "int", "float", "bool", "none", "dict", "list"})


def _is_union_tag(part: str) -> bool:
    """pydantic names union branches in error paths ('str', 'list[MessageItem]',
    'TextPart'); they are not part of the client's parameter path."""
    return "[" in part or part in _SCALAR_TAGS or part[:1].isupper()


def validation_error(error: ValidationError | RequestValidationError) -> APIError:
    # With unions every branch reports; the deepest path is the one the client meant.
    first = max(error.errors(), key=lambda entry: len(entry.get("loc", ())))
    loc = tuple(first.get("loc", ()))
    param = param_path(loc)
    if first.get("type") == "extra_forbidden":
        return APIError(400, f"Unknown parameter: '{param}'.", param=param, code="unknown_parameter")
    message = first.get("msg", "invalid value")
    if first.get("type") == FIXED_MESSAGE_ERROR:
        return APIError(400, message, param=param, code="invalid_value")
    message = message.removeprefix("Value error, ")
    return APIError(400, f"Invalid value for '{param}': {message}", param=param, code="invalid_value")


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(APIError)
    async def _api_error(_: Request, error: APIError) -> JSONResponse:
        return error.response()

    @app.exception_handler(RequestValidationError)
    async def _request_validation(_: Request, error: RequestValidationError) -> JSONResponse:
        return validation_error(error).response()

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, error: StarletteHTTPException) -> JSONResponse:
        # Routing's own 404 and 405 say only "Not Found"; OpenAI's API names the request.
        message = str(error.detail)
        if error.status_code == 404:
            message = f"Invalid URL ({request.method} {request.url.path})"
        elif error.status_code == 405:
            message = f"Invalid method for URL ({request.method} {request.url.path})"
        headers = dict(error.headers) if error.headers else None
        return APIError(error.status_code, message, headers=headers).response()

    @app.exception_handler(Exception)
    async def _bug(_: Request, error: Exception) -> JSONResponse:
        log.exception("unhandled error")
        return JSONResponse(
            {"error": {"message": "Internal server error.", "type": "server_error",
                       "param": None, "code": None}},
            status_code=500,
        )


# How a failing dependency (NATS, the response store) reaches a client: a 503 naming the
# dependency and nothing else; its address and its driver's message go to the log only:
# they describe the deployment, which is no client's business. A request event too large
# for NATS and a client-chosen id claimed first get their own 413 and 409.
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
