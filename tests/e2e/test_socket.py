"""WebSocket mode on /v1/responses with a raw client: the SSE events on the socket, one
request event and one log per response, chains held by the connection with
`store: false`, lanes, errors as `error` events, bounds, keys, and a dropped socket
cancelling what it was generating."""

from __future__ import annotations

import asyncio
import json
import secrets
from collections.abc import Iterator
from typing import Any

import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import InvalidStatus

from cli.nats_server import free_port
from events import RequestAccepted
from tests.conformance.open_responses import socket_error_errors
from tests.conftest import DEFAULT_MODEL, Stack
from tests.e2e.test_queue_consumer import read_log
from tests.processes import SpateProcess, wait_http

KEY = "key-socket"
ENDED = ("response.completed", "response.incomplete")  # a brief answer may hit its cap
TERMINAL = (*ENDED, "response.failed")
BRIEF = {"model": DEFAULT_MODEL, "temperature": 0, "max_output_tokens": 6, "store": False}
LONG = {"model": DEFAULT_MODEL, "input": "Write a very long story about a lighthouse keeper.",
        "temperature": 0, "max_output_tokens": 400, "ignore_eos": True, "store": False}


@pytest.fixture(scope="module")
def socket_url(stack: Stack) -> Iterator[str]:
    """An API replica with a key and small per-connection bounds, on the stack's NATS."""
    port = free_port()
    api = SpateProcess(["api", "--port", str(port)], {
        "SPATE_NATS_URL": stack.nats_url, "SPATE_API_KEYS": KEY, "SPATE_WS_MAX_LANES": "2",
        "SPATE_WS_MAX_QUEUED": "1", "SPATE_MAX_BODY_BYTES": "65536",
    }, "api-socket")
    try:
        wait_http(f"http://127.0.0.1:{port}/ready", api, timeout=60)
        yield f"ws://127.0.0.1:{port}/v1/responses"
    finally:
        api.stop()


def opened(url: str, key: str | None = KEY) -> Any:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return connect(url, additional_headers=headers, max_size=None)


def create(**fields: Any) -> str:
    return json.dumps({"type": "response.create", **fields})


async def next_event(socket: ClientConnection, timeout: float = 300) -> dict[str, Any]:
    event: dict[str, Any] = json.loads(await asyncio.wait_for(socket.recv(), timeout))
    return event


async def until_terminal(socket: ClientConnection, stream_id: str | None = None
                         ) -> list[dict[str, Any]]:
    """The events of one response (of one lane, when named), to its terminal event."""
    events = []
    while True:
        event = await next_event(socket)
        if stream_id is not None and event.get("stream_id") != stream_id:
            continue
        events.append(event)
        if event["type"] in TERMINAL or event["type"] == "error":
            return events


def test_a_create_streams_the_sse_events_and_is_one_logged_request(socket_url: str,
                                                                    stack: Stack) -> None:
    async def run() -> list[dict[str, Any]]:
        async with opened(socket_url) as socket:
            await socket.send(create(**BRIEF, input="Say hello."))
            return await until_terminal(socket)

    events = asyncio.run(run())
    assert events[0]["type"] == "response.created" and events[-1]["type"] in ENDED
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert all("stream_id" not in e for e in events)
    final = events[-1]["response"]
    text = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    assert text and final["output"][0]["content"][0]["text"] == text
    log = asyncio.run(read_log(stack.nats_url, final["id"]))
    assert [type(e) for e in log].count(RequestAccepted) == 1
    assert log[-1].type == "generation.finished"


def test_a_chain_with_store_false_builds_on_what_the_connection_holds(socket_url: str,
                                                                       stack: Stack) -> None:
    async def run() -> tuple[dict[str, Any], dict[str, Any]]:
        async with opened(socket_url) as socket:
            await socket.send(create(**BRIEF, input="My name is Zorblax."))
            first = (await until_terminal(socket))[-1]["response"]
            await socket.send(create(**BRIEF, input="What is my name?",
                                     previous_response_id=first["id"]))
            return first, (await until_terminal(socket))[-1]["response"]

    first, second = asyncio.run(run())
    assert second["status"] != "failed" and second["previous_response_id"] == first["id"]
    log = asyncio.run(read_log(stack.nats_url, second["id"]))
    request = log[0]
    assert isinstance(request, RequestAccepted)
    contents = [message.content for message in request.messages]
    assert "My name is Zorblax." in contents and "What is my name?" in contents
    first_answer = first["output"][0]["content"][0]["text"]
    assert any(first_answer.strip() in content for content in contents)


def test_an_unknown_previous_response_is_previous_response_not_found(socket_url: str) -> None:
    async def run() -> dict[str, Any]:
        async with opened(socket_url) as socket:
            await socket.send(create(**BRIEF, input="x", stream_id="lane-1",
                                     previous_response_id="resp_elsewhere"))
            return await next_event(socket)

    error = asyncio.run(run())
    assert error["type"] == "error" and error["status"] == 400
    assert error["stream_id"] == "lane-1"
    assert error["error"]["code"] == "previous_response_not_found"
    assert error["error"]["param"] == "previous_response_id"


def test_an_output_answering_no_call_of_the_chain_fails_and_evicts_it(socket_url: str) -> None:
    """The Open Responses WebSocket case: a continuation whose `function_call_output`
    answers no call of the previous response is an `error` event (the specification's
    WebSocketErrorEvent), and the chain is gone from the connection afterwards."""
    async def run() -> tuple[dict[str, Any], dict[str, Any]]:
        async with opened(socket_url) as socket:
            await socket.send(create(**BRIEF, input="Say hello."))
            first = (await until_terminal(socket))[-1]["response"]
            await socket.send(create(**BRIEF, previous_response_id=first["id"], input=[
                {"type": "function_call_output", "call_id": "call_nope", "output": "fog"}]))
            mismatch = await next_event(socket)
            await socket.send(create(**BRIEF, previous_response_id=first["id"], input="Hi."))
            return mismatch, await next_event(socket)

    mismatch, after = asyncio.run(run())
    assert not socket_error_errors(mismatch), mismatch
    assert mismatch["type"] == "error" and mismatch["status"] == 400, mismatch
    assert mismatch["error"]["param"] == "input[0].call_id"
    assert "call_nope" in mismatch["error"]["message"]
    # Evicted: the same previous_response_id no longer continues on this connection.
    assert after["type"] == "error", after
    assert after["error"]["code"] == "previous_response_not_found"


def test_bad_events_are_error_events_and_the_socket_stays_open(socket_url: str) -> None:
    bad = [
        ("{not json", None, "invalid_json", None),
        (json.dumps([1]), None, "invalid_value", None),
        (json.dumps({"type": "response.cancel"}), None, "invalid_value", "type"),
        (create(**BRIEF, input="x", stream_id="no spaces"), None, "invalid_stream_id", "stream_id"),
        (create(**BRIEF, input="x", stream_id="a", background=True), "a", "invalid_value",
         "background"),
        (create(**BRIEF, input="x", stream=False), None, "invalid_value", "stream"),
        (create(**BRIEF, input="x", stream_id="b", bogus=1), "b", "unknown_parameter", "bogus"),
        (create(**{**BRIEF, "temperature": 9}, input="x"), None, "invalid_value", "temperature"),
        (create(**{**BRIEF, "model": "no-such-model"}, input="x"), None, "model_not_found", "model"),
        (create(**BRIEF, input="x" * 70000), None, "request_too_large", None),
    ]

    async def run() -> list[dict[str, Any]]:
        async with opened(socket_url) as socket:
            errors = []
            for message, *_ in bad:
                await socket.send(message)
                errors.append(await next_event(socket))
            await socket.send(create(**BRIEF, input="Still there?"))
            errors.append((await until_terminal(socket))[-1])
            return errors

    answers = asyncio.run(run())
    for (_, stream_id, code, param), error in zip(bad, answers, strict=False):
        assert error["type"] == "error", error
        assert error["error"]["code"] == code and error["error"]["param"] == param, error
        assert error.get("stream_id") == stream_id
        assert error["status"] in (400, 404, 413)
    assert answers[-1]["type"] in ENDED


def test_lanes_run_side_by_side_and_each_is_fifo(socket_url: str) -> None:
    async def run() -> list[dict[str, Any]]:
        async with opened(socket_url) as socket:
            await socket.send(create(**BRIEF, input="Count to three.", stream_id="a"))
            await socket.send(create(**BRIEF, input="Name a color.", stream_id="b"))
            await socket.send(create(**BRIEF, input="Name a fruit.", stream_id="a"))
            events = []
            while sum(e["type"] in ENDED for e in events) < 3:
                events.append(await next_event(socket))
            return events

    events = asyncio.run(run())
    assert {e["stream_id"] for e in events} == {"a", "b"}
    lane_a = [e for e in events if e["stream_id"] == "a"]
    starts = [i for i, e in enumerate(lane_a) if e["type"] == "response.created"]
    ends = [i for i, e in enumerate(lane_a) if e["type"] in ENDED]
    assert len(starts) == 2 and ends[0] < starts[1]  # the second waited for the first
    kinds = [e["stream_id"] for e in events if e["type"] == "response.created"]
    assert kinds[:2] == ["a", "b"]  # b did not wait for a


def test_bounds_on_lanes_and_queued_creates(socket_url: str) -> None:
    async def run() -> list[dict[str, Any]]:
        async with opened(socket_url) as socket:
            await socket.send(create(**LONG, stream_id="one"))
            await socket.send(create(**LONG, stream_id="two"))
            await socket.send(create(**LONG, stream_id="three"))  # past 2 lanes
            await socket.send(create(**BRIEF, input="later", stream_id="one"))  # waits: 1 queued
            await socket.send(create(**BRIEF, input="later", stream_id="two"))  # past 1 queued
            return [e for e in [await next_event(socket) for _ in range(8)] if e["type"] == "error"]

    errors = asyncio.run(run())
    assert [(e["stream_id"], e["status"], e["error"]["type"]) for e in errors] == [
        ("three", 429, "rate_limit_error"), ("two", 429, "rate_limit_error")]


def test_keys_are_enforced_on_the_upgrade(socket_url: str) -> None:
    async def status_of(key: str | None) -> int:
        try:
            async with opened(socket_url, key):
                return 101
        except InvalidStatus as refused:
            body = json.loads(refused.response.body or b"{}")
            assert body["error"]["code"] == "invalid_api_key"
            return refused.response.status_code

    assert asyncio.run(status_of(None)) == 401
    assert asyncio.run(status_of("wrong")) == 401
    assert asyncio.run(status_of(KEY)) == 101


def test_a_dropped_socket_cancels_what_it_was_generating(socket_url: str, stack: Stack) -> None:
    async def run() -> str:
        async with opened(socket_url) as socket:
            await socket.send(create(**LONG, stream_id="long"))
            response_id, deltas = None, 0
            while deltas < 3:
                event = await next_event(socket)
                response_id = response_id or event.get("response", {}).get("id")
                deltas += event["type"] == "response.output_text.delta"
            assert response_id is not None
            return response_id  # leaving the block closes the socket mid-answer

    response_id = asyncio.run(run())
    log = asyncio.run(read_log(stack.nats_url, response_id))
    assert log[-1].finish_reason == "cancelled"
    assert log[-1].usage.output_tokens < 400


def test_generate_false_holds_the_input_for_the_next_turn(socket_url: str, stack: Stack) -> None:
    async def run() -> tuple[list[dict[str, Any]], dict[str, Any]]:
        async with opened(socket_url) as socket:
            await socket.send(create(**BRIEF, input="The password is swordfish.",
                                     generate=False))
            warm = await until_terminal(socket)
            await socket.send(create(**BRIEF, input="What is the password?",
                                     previous_response_id=warm[-1]["response"]["id"]))
            return warm, (await until_terminal(socket))[-1]["response"]

    warm, answer = asyncio.run(run())
    assert [e["type"] for e in warm] == ["response.created", "response.in_progress",
                                         "response.completed"]
    assert warm[-1]["response"]["output"] == []
    log = asyncio.run(read_log(stack.nats_url, answer["id"]))
    contents = [message.content for message in log[0].messages]
    assert "The password is swordfish." in contents


def test_generate_false_warms_the_prefix_cache_for_the_next_turn(socket_url: str) -> None:
    """A worker prefilled the warmed input: the turn that builds on it finds it cached,
    where the same turn in a cache scope of its own, not warmed, finds nothing."""
    notes = " ".join(f"Note {n}: the tide table lists {n * 7 % 31} knots." for n in range(30))
    history = [{"role": "user", "content": notes}, {"role": "user", "content": "Knots?"}]

    async def turn(salt: str, warm: bool) -> dict[str, Any]:
        fields = {**BRIEF, "cache_salt": salt}
        async with opened(socket_url) as socket:
            if not warm:
                await socket.send(create(**fields, input=history))
                return (await until_terminal(socket))[-1]["response"]
            await socket.send(create(**fields, input=notes, generate=False))
            warmed = (await until_terminal(socket))[-1]
            assert warmed["type"] == "response.completed", warmed
            await socket.send(create(**fields, input="Knots?",
                                     previous_response_id=warmed["response"]["id"]))
            return (await until_terminal(socket))[-1]["response"]

    salt = secrets.token_hex(4)
    cold = asyncio.run(turn(f"cold-{salt}", warm=False))
    warmed = asyncio.run(turn(f"warm-{salt}", warm=True))
    assert cold["usage"]["input_tokens_details"]["cached_tokens"] == 0, cold["usage"]
    # The notes are most of the prompt; all of their full blocks were cached.
    assert warmed["usage"]["input_tokens_details"]["cached_tokens"] > 300, warmed["usage"]
    assert warmed["usage"]["input_tokens"] == cold["usage"]["input_tokens"]
