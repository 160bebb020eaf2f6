"""`KeepAlives`: a keep-alive line only while an SSE response is quiet, framed so that
the official SDK's decoder (which broke on sse-starlette's comment-then-blank-line ping)
dispatches nothing for it, never after the last body, and a cut when the client does
not take it. Driven through the ASGI `send` it wraps, as sse-starlette drives it."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from openai._streaming import SSEDecoder
from pydantic import ValidationError
from sse_starlette import ServerSentEvent
from sse_starlette.sse import SendTimeoutError

from api.settings import ApiSettings
from api.streaming.keepalive import KEEPALIVE, KeepAlives

START = {"type": "http.response.start", "status": 200, "headers": []}
END = {"type": "http.response.body", "body": b"", "more_body": False}


def event(number: int) -> dict[str, Any]:
    body = ServerSentEvent(data=f'{{"n":{number}}}', event="tick", id=str(number)).encode()
    return {"type": "http.response.body", "body": body, "more_body": True}


class Client:
    """An ASGI server's `send`, as far as these tests need it: what was sent, and a
    signal once `wanted` keep-alives have come."""

    def __init__(self, wanted: int = 0) -> None:
        self.sent: list[dict[str, Any]] = []
        self.wanted = wanted
        self.keepalives_came = asyncio.Event()

    async def send(self, message: Any) -> None:
        self.sent.append(message)
        if sum(m.get("body") == KEEPALIVE for m in self.sent) >= self.wanted:
            self.keepalives_came.set()

    def body(self) -> bytes:
        return b"".join(m.get("body", b"") for m in self.sent)


async def test_a_quiet_stream_gets_keepalives_that_the_sdk_decoder_skips() -> None:
    client = Client(wanted=3)
    keepalives = KeepAlives(client.send, every_s=0.01, send_timeout_s=30)

    async def stream() -> None:
        pinger = asyncio.ensure_future(keepalives.run())
        for message in (START, event(0), event(1)):
            await keepalives.send(message)
        await client.keepalives_came.wait()
        await keepalives.send(event(2))
        await keepalives.send(END)
        await pinger

    await asyncio.wait_for(stream(), 30)
    bodies = [m["body"] for m in client.sent[1:]]
    assert bodies[:2] == [event(0)["body"], event(1)["body"]]
    assert set(bodies[2:-2]) == {KEEPALIVE} and len(bodies) >= 7
    assert bodies[-2:] == [event(2)["body"], b""]
    # The decoder that dispatched an empty event at the blank line of the old ping, once
    # an id had been seen, reads exactly the three events here.
    decoded = list(SSEDecoder().iter_bytes(iter([client.body()])))
    assert [(sse.id, sse.json()) for sse in decoded] == [(str(n), {"n": n}) for n in range(3)]


async def test_a_stream_that_keeps_talking_gets_none() -> None:
    client = Client()
    keepalives = KeepAlives(client.send, every_s=60, send_timeout_s=30)
    pinger = asyncio.ensure_future(keepalives.run())
    for message in (START, *(event(n) for n in range(500)), END):
        await keepalives.send(message)
        await asyncio.sleep(0)
    pinger.cancel()  # as sse-starlette cancels it with the response
    assert client.sent == [START, *(event(n) for n in range(500)), END]


async def test_none_follows_the_last_body() -> None:
    client = Client()
    keepalives = KeepAlives(client.send, every_s=0.01, send_timeout_s=30)
    pinger = asyncio.ensure_future(keepalives.run())
    await keepalives.send(START)
    await keepalives.send(END)
    await asyncio.wait_for(pinger, 30)  # it ends by itself once the response has
    assert client.sent == [START, END]


async def test_a_keepalive_the_client_does_not_take_cuts_the_stream() -> None:
    stalled = asyncio.Event()

    async def stalled_send(message: Any) -> None:
        if message["type"] == "http.response.body":
            await stalled.wait()  # a client that reads nothing: the socket's buffer full

    keepalives = KeepAlives(stalled_send, every_s=0.01, send_timeout_s=0.05)
    await keepalives.send(START)
    with pytest.raises(SendTimeoutError):
        await asyncio.wait_for(keepalives.run(), 30)


def test_the_interval_may_be_a_fraction_of_a_second_but_not_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SPATE_SSE_PING_S", "0.05")
    assert ApiSettings().sse_ping_s == 0.05
    for bad in ("0", "0.001", "-1", "soon"):
        monkeypatch.setenv("SPATE_SSE_PING_S", bad)
        with pytest.raises(ValidationError, match="sse_ping_s"):
            ApiSettings()
