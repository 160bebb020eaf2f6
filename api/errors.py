"""OpenAI-shaped error bodies, and the handlers that make every failure one of them."""

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
