"""`with_keepalives`: a keep-alive line only while the stream is quiet, framed so that the
official SDK's decoder (which broke on sse-starlette's comment-then-blank-line ping)
dispatches nothing for it, and a close mid-wait that runs the stream's cleanup to its
end instead of raising."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator

import pytest
from openai._streaming import SSEDecoder
from pydantic import ValidationError
from sse_starlette import ServerSentEvent

from api.settings import ApiSettings
from api.streaming.keepalive import KEEPALIVE, with_keepalives


def event(number: int) -> bytes:
    return ServerSentEvent(data=f'{{"n":{number}}}', event="tick", id=str(number)).encode()


async def events_then_quiet(count: int, quiet: asyncio.Event, cleaned: list[str]) -> AsyncGenerator[bytes, None]:
    """`count` events back to back, then nothing until `quiet` is set, then one more."""
    try:
        for number in range(count):
            yield event(number)
        await quiet.wait()
        yield event(count)
    finally:
        await asyncio.sleep(0)  # a cleanup that awaits, as closing a subscription does
        cleaned.append("done")


async def test_a_stream_that_keeps_talking_gets_no_keepalive() -> None:
    quiet, cleaned = asyncio.Event(), []
    quiet.set()
    chunks = [chunk async for chunk in with_keepalives(events_then_quiet(500, quiet, cleaned), 60)]
    assert chunks == [event(n) for n in range(501)]
    assert cleaned == ["done"]


async def test_a_quiet_stream_gets_keepalives_that_the_sdk_decoder_skips() -> None:
    quiet, cleaned = asyncio.Event(), []
    chunks: list[bytes] = []
    async with asyncio.timeout(30):
        async for chunk in with_keepalives(events_then_quiet(2, quiet, cleaned), 0.01):
            chunks.append(chunk)
            if chunks.count(KEEPALIVE) == 3:
                quiet.set()
    assert chunks[:2] == [event(0), event(1)] and chunks[-1] == event(2)
    assert chunks[2:-1] == [KEEPALIVE] * (len(chunks) - 3) and len(chunks) >= 6
    # The decoder that dispatched an empty event at the blank line of the old ping, once
    # an id had been seen; here it reads exactly the three events.
    decoded = list(SSEDecoder().iter_bytes(iter(chunks)))
    assert [(sse.id, sse.json()) for sse in decoded] == [(str(n), {"n": n}) for n in range(3)]
    assert cleaned == ["done"]


async def test_closing_while_the_next_event_is_awaited_runs_the_cleanup() -> None:
    quiet, cleaned = asyncio.Event(), []
    stream = with_keepalives(events_then_quiet(1, quiet, cleaned), 0.01)
    assert await anext(stream) == event(0)
    assert await anext(stream) == KEEPALIVE  # the inner stream now waits on `quiet`
    await stream.aclose()
    assert cleaned == ["done"]


async def test_closing_after_an_event_closes_the_stream() -> None:
    quiet, cleaned = asyncio.Event(), []
    stream = with_keepalives(events_then_quiet(3, quiet, cleaned), 60)
    assert await anext(stream) == event(0)
    await stream.aclose()
    assert cleaned == ["done"]


async def test_an_error_in_the_stream_reaches_the_reader() -> None:
    async def failing() -> AsyncGenerator[bytes, None]:
        yield event(0)
        raise ValueError("the log is gone")

    stream = with_keepalives(failing(), 60)
    assert await anext(stream) == event(0)
    with pytest.raises(ValueError, match="the log is gone"):
        await anext(stream)


def test_the_interval_may_be_a_fraction_of_a_second_but_not_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SPATE_SSE_PING_S", "0.05")
    assert ApiSettings().sse_ping_s == 0.05
    for bad in ("0", "0.001", "-1", "soon"):
        monkeypatch.setenv("SPATE_SSE_PING_S", bad)
        with pytest.raises(ValidationError, match="sse_ping_s"):
            ApiSettings()
