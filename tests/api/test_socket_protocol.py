"""WebSocket mode's wire format and the chains a connection holds, without a server:
the create envelope, the error shape, the lane on every event, and the history bound."""

from __future__ import annotations

import json

import pytest

from api.errors import APIError
from api.websocket.chains import HeldChains, size_of
from api.websocket.protocol import SocketError, error_event, parse_create, server_event


def test_a_create_is_the_post_body_with_its_lane() -> None:
    message = json.dumps({"type": "response.create", "stream_id": "lane.1", "model": "m",
                          "input": "hi", "stream": True, "background": False})
    create = parse_create(message, 1 << 20)
    assert create.stream_id == "lane.1" and create.generate
    assert create.body == {"model": "m", "input": "hi"}
    warm = parse_create(json.dumps({"type": "response.create", "generate": False}), 1 << 20)
    assert warm.stream_id is None and not warm.generate


@pytest.mark.parametrize(("event", "param", "code", "lane"), [
    ({"type": "response.cancel"}, "type", "invalid_value", None),
    ({"type": "response.create", "stream_id": "x" * 257}, "stream_id", "invalid_stream_id", None),
    ({"type": "response.create", "stream_id": 3}, "stream_id", "invalid_stream_id", None),
    ({"type": "response.create", "stream_id": "a", "generate": "no"}, "generate",
     "invalid_value", "a"),
    ({"type": "response.create", "stream_id": "a", "stream": False}, "stream", "invalid_value",
     "a"),
    ({"type": "response.create", "background": True}, "background", "invalid_value", None),
])
def test_a_bad_envelope_is_a_400_on_its_lane(event: dict[str, object], param: str, code: str,
                                             lane: str | None) -> None:
    with pytest.raises(SocketError) as refused:
        parse_create(json.dumps(event), 1 << 20)
    assert (refused.value.status, refused.value.param, refused.value.code) == (400, param, code)
    assert refused.value.stream_id == lane


def test_a_message_past_the_bound_is_a_413() -> None:
    with pytest.raises(SocketError) as refused:
        parse_create(json.dumps({"type": "response.create", "input": "x" * 100}), 64)
    assert refused.value.status == 413 and refused.value.code == "request_too_large"


def test_errors_take_openai_websocket_shape() -> None:
    event = error_event(APIError(429, "busy", code="rate_limit_exceeded"), "a")
    assert event == {"type": "error", "status": 429, "stream_id": "a", "error": {
        "message": "busy", "type": "rate_limit_error", "param": None,
        "code": "rate_limit_exceeded"}}
    failed = server_event({"type": "error", "sequence_number": 7, "code": "model_unavailable",
                           "message": "gone", "param": None}, None)
    assert failed["status"] == 503 and failed["sequence_number"] == 7
    assert failed["error"]["code"] == "model_unavailable" and "stream_id" not in failed


def test_every_event_names_its_lane() -> None:
    delta = {"type": "response.output_text.delta", "sequence_number": 4, "delta": "x"}
    assert server_event(delta, "b") == {**delta, "stream_id": "b"}
    assert server_event(delta, None) is delta


def test_held_chains_stay_within_their_bytes_dropping_the_least_recently_used() -> None:
    """A connection's held history past SPATE_WS_HELD_BYTES (here three turns' worth)
    drops the least recently used chain; a chain alone past it is not held."""
    turn = [{"type": "message", "role": "user", "content": [{"type": "input_text",
                                                             "text": "x" * 100}]}]
    held = HeldChains(3 * size_of(turn))
    for name in ("a", "b", "c"):
        assert held.hold(name, turn)
    assert held.history("a") == turn  # now the most recently used
    assert held.hold("d", turn)
    assert "b" not in held and {"a", "c", "d"} == {n for n in "abcd" if n in held}
    assert held.bytes <= held.max_bytes
    assert not held.hold("huge", turn * 4) and "huge" not in held
