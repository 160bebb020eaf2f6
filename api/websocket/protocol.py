"""WebSocket mode's wire format on `/v1/responses`: the `response.create` client event
(the POST body plus `stream_id` and `generate`) and the server events, which are the
SSE events themselves with the lane's `stream_id`, and errors as `error` events."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from api.errors import APIError
from api.schema.body import decoded

CREATE = "response.create"
# A lane name: what OpenAI's API takes for `stream_id`.
STREAM_ID = re.compile(r"[A-Za-z0-9_.-]{1,256}")
# Envelope fields of a create that are not fields of the POST body.
ENVELOPE = ("type", "stream_id", "generate")
# The status a failed response's error code carries over HTTP; an `error` event on the
# socket names it too, as OpenAI's WebSocket errors do.
STATUS_OF_CODE = {
    "context_length_exceeded": 400, "invalid_prompt": 400, "invalid_value": 400,
    "model_unavailable": 503, "bus_unavailable": 503, "server_shutting_down": 503,
}


class SocketError(APIError):
    """An APIError that belongs to one lane (its create's `stream_id`, when it had one)."""

    def __init__(self, error: APIError, stream_id: str | None) -> None:
        super().__init__(error.status, error.message, param=error.param, code=error.code,
                         headers=error.headers)
        self.stream_id = stream_id


@dataclass(frozen=True, slots=True)
class ClientCreate:
    """One `response.create`: its lane, whether to generate, and the POST body it holds."""

    stream_id: str | None
    generate: bool
    body: dict[str, Any]


def parse_create(message: str | bytes, max_bytes: int) -> ClientCreate:
    """The create a client message holds; a SocketError (with the lane, once known)
    for anything else."""
    if len(message) > max_bytes:
        raise SocketError(APIError(413, f"The message exceeds {max_bytes} bytes.",
                                   code="request_too_large"), None)
    try:
        event = decoded(message)
    except APIError as error:
        raise SocketError(error, None) from error
    if not isinstance(event, dict):
        raise SocketError(_invalid("A client event must be a JSON object.", None), None)
    stream_id = event.get("stream_id")
    if stream_id is not None and not (isinstance(stream_id, str)
                                      and STREAM_ID.fullmatch(stream_id)):
        raise SocketError(APIError(
            400, "Invalid 'stream_id': 1 to 256 letters, digits, '_', '.' or '-'.",
            param="stream_id", code="invalid_stream_id"), None)
    if event.get("type") != CREATE:
        raise SocketError(_invalid(
            f"Unsupported client event type {event.get('type')!r}: this server takes "
            f"'{CREATE}'.", "type"), stream_id)
    generate = event.get("generate", True)
    if not isinstance(generate, bool):
        raise SocketError(_invalid("'generate' must be a boolean.", "generate"), stream_id)
    body = {name: value for name, value in event.items() if name not in ENVELOPE}
    # Every event streams on a socket: `stream: true` says nothing new, `false` cannot be.
    if body.pop("stream", True) is not True:
        raise SocketError(_invalid("Responses always stream over a WebSocket: leave 'stream' "
                                   "out.", "stream"), stream_id)
    if body.get("background"):
        raise SocketError(_invalid("'background' is not supported over a WebSocket: use "
                                   "POST /v1/responses.", "background"), stream_id)
    body.pop("background", None)
    return ClientCreate(stream_id, generate, body)


def _invalid(message: str, param: str | None) -> APIError:
    return APIError(400, message, param=param, code="invalid_value")


def error_event(error: APIError, stream_id: str | None,
                sequence_number: int | None = None) -> dict[str, Any]:
    """An error as OpenAI's WebSocket mode sends it: the HTTP body's `error` object, the
    status the same failure has over HTTP, and the lane."""
    event: dict[str, Any] = {"type": "error", **error.body(), "status": error.status}
    if sequence_number is not None:
        event["sequence_number"] = sequence_number
    if stream_id is not None:
        event["stream_id"] = stream_id
    return event


def server_event(sse: dict[str, Any], stream_id: str | None) -> dict[str, Any]:
    """An SSE event of the fold as it goes on the socket: the same event with the lane's
    `stream_id`; an `error` in the socket's error shape, its sequence number kept."""
    if sse["type"] == "error":
        code = sse.get("code")
        status = STATUS_OF_CODE.get(code or "", 500)
        error = APIError(status, sse["message"], param=sse.get("param"), code=code)
        return error_event(error, stream_id, sse.get("sequence_number"))
    return sse if stream_id is None else {**sse, "stream_id": stream_id}

