"""Reading and validating JSON request bodies (POST /v1/responses and the others)."""

from __future__ import annotations

import json
from typing import TypeVar

from fastapi import Request
from pydantic import BaseModel, ValidationError

from api.errors import APIError, validation_error
from api.request_model import FieldRejected, ResponsesRequest

Body = TypeVar("Body", bound=BaseModel)


async def read_request(request: Request, max_body_bytes: int) -> ResponsesRequest:
    return await read_body(request, ResponsesRequest, max_body_bytes)


async def read_body(request: Request, model: type[Body], max_body_bytes: int) -> Body:
    """The body as `model`; a 400 naming the field for anything it refuses, 413 when big."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > max_body_bytes:
        raise APIError(413, f"The request body exceeds {max_body_bytes} bytes.", code="request_too_large")
    raw = await request.body()
    if len(raw) > max_body_bytes:
        raise APIError(413, f"The request body exceeds {max_body_bytes} bytes.", code="request_too_large")
    try:
        body = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise APIError(400, f"The request body is not valid JSON: {error}", code="invalid_json") from error
    try:
        return model.model_validate(body)
    except FieldRejected as error:
        raise APIError(400, error.message, param=error.param or None,
                       code="unknown_parameter" if error.message.startswith("Unknown") else "invalid_value") from error
    except ValidationError as error:
        raise validation_error(error) from error
