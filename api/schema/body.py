"""Reading and validating JSON request bodies (POST /v1/responses and the others)."""

from __future__ import annotations

import json
from typing import Any, TypeVar

from fastapi import Request
from pydantic import BaseModel, ValidationError
from starlette.requests import ClientDisconnect

from api.errors import APIError, validation_error
from api.schema.request import FieldRejected, ResponsesRequest

Body = TypeVar("Body", bound=BaseModel)

# Nesting deeper than this is refused before validation: no request field needs it, and
# recursive validators and grammar compilers would otherwise pay for it.
MAX_JSON_DEPTH = 64


def too_deep(value: Any, limit: int = MAX_JSON_DEPTH) -> str | None:
    """The path of the first value nested deeper than `limit`, or None (iterative, so a
    hostile body cannot exhaust the stack here)."""
    stack: list[tuple[Any, str, int]] = [(value, "", 0)]
    while stack:
        node, path, depth = stack.pop()
        if depth > limit:
            return path
        if isinstance(node, dict):
            stack.extend((child, f"{path}.{key}" if path else str(key), depth + 1)
                         for key, child in node.items())
        elif isinstance(node, list):
            stack.extend((child, f"{path}[{index}]", depth + 1) for index, child in enumerate(node))
    return None


def _refuse_constant(name: str) -> Any:
    # Python's json reads NaN and Infinity, which JSON does not have; a NaN would pass
    # every numeric bound, since each comparison with it is false.
    raise ValueError(f"{name} is not a JSON value")


def body_too_large(max_body_bytes: int) -> APIError:
    # The rest of the body is never read, so the connection cannot carry another request:
    # the answer closes it.
    return APIError(413, f"The request body exceeds {max_body_bytes} bytes.",
                    code="request_too_large", headers={"Connection": "close"})


async def read_bounded(request: Request, max_body_bytes: int) -> bytes:
    """The raw body, read chunk by chunk and refused (413) as soon as it passes
    `max_body_bytes`, whether its length was declared or it comes chunked: what a client
    sends past the bound is never read, let alone held."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > max_body_bytes:
        raise body_too_large(max_body_bytes)
    chunks: list[bytes] = []
    size = 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > max_body_bytes:
                raise body_too_large(max_body_bytes)
            chunks.append(chunk)
    except ClientDisconnect:
        # Nobody is left to answer; the status only shows in the access log.
        raise APIError(400, "The client disconnected before the body was complete.",
                       code="client_disconnected") from None
    return b"".join(chunks)


async def read_request(request: Request, max_body_bytes: int) -> ResponsesRequest:
    return await read_body(request, ResponsesRequest, max_body_bytes)


async def read_body(request: Request, model: type[Body], max_body_bytes: int) -> Body:
    """The body as `model`; a 400 naming the field for anything it refuses, 413 when big."""
    raw = await read_bounded(request, max_body_bytes)
    return validated(decoded(raw), model)


def decoded(raw: bytes | str) -> Any:
    """The JSON value of a body or a WebSocket message; a 400 for anything not JSON or
    nested too deep."""
    try:
        body = json.loads(raw, parse_constant=_refuse_constant)
    except (ValueError, UnicodeDecodeError, RecursionError) as error:
        # ValueError covers malformed JSON and integers too long to convert.
        raise APIError(400, f"The request body is not valid JSON: {error}", code="invalid_json") from error
    deep = too_deep(body)
    if deep is not None:
        raise APIError(400, f"'{deep}' is nested more than {MAX_JSON_DEPTH} levels deep.",
                       param=deep.split(".", 1)[0].split("[", 1)[0] or None, code="invalid_value")
    return body


def validated(body: Any, model: type[Body]) -> Body:
    """A decoded body as `model`; a 400 naming the field for anything it refuses."""
    try:
        return model.model_validate(body)
    except FieldRejected as error:
        raise APIError(400, error.message, param=error.param or None,
                       code="unknown_parameter" if error.message.startswith("Unknown") else "invalid_value") from error
    except ValidationError as error:
        raise validation_error(error) from error
    except (TypeError, ValueError, RecursionError) as error:
        # A shape no validator foresaw is still the client's input: a 400, never a 500.
        raise APIError(400, f"The request body is not a valid request: {error}",
                       code="invalid_value") from error
