"""Reading and validating the JSON body of POST /v1/responses."""

from __future__ import annotations

import json

from fastapi import Request
from pydantic import ValidationError

from api.errors import APIError, validation_error
from api.request_model import FieldRejected, ResponsesRequest


async def read_request(request: Request, max_body_bytes: int) -> ResponsesRequest:
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
        return ResponsesRequest.model_validate(body)
    except FieldRejected as error:
        raise APIError(400, error.message, param=error.param or None,
                       code="unknown_parameter" if error.message.startswith("Unknown") else "invalid_value") from error
    except ValidationError as error:
        raise validation_error(error) from error
