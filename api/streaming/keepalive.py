"""Keep-alives on an SSE stream: a comment line whenever the stream has been quiet for
the ping interval, framed so that no client reads it as an event.

The usual keep-alive (sse-starlette's ping) is a comment followed by a blank line. A
parser that follows the WHATWG algorithm to the letter ignores it, but the official
`openai` SDK's decoder (and httpx-sse's, which it derives from) dispatches an event at
every blank line once an `id:` line has been seen, since the last event id is kept
across events: the blank line after the comment then dispatches an event with empty
data, and the SDK's `json()` on it raises. Every stream of this server carries ids (for
Last-Event-ID), so every stream longer than the ping interval broke the SDK.

The keep-alive here is the comment line alone. Sent between two events, it becomes the
first line of the next event's block, where every parser (the SDKs', httpx-sse's, a
browser's EventSource) skips comment lines; no blank line of its own, so nothing is
dispatched. A stream that ends after one ends on a complete line with no pending
fields, which a parser discards.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any, TypeVar

import anyio
from sse_starlette import EventSourceResponse

log = logging.getLogger("spate.api")

Event = TypeVar("Event")

# The line as it goes on the wire, ended with the separator the events are framed with.
KEEPALIVE = b": keep-alive" + EventSourceResponse.DEFAULT_SEPARATOR.encode()


async def with_keepalives(
    events: AsyncGenerator[Event, None], every_s: float
) -> AsyncIterator[Event | bytes]:
    """`events`, with KEEPALIVE between two of them each time `every_s` seconds pass
    without one (so never on a stream that keeps talking).

    The next event is awaited in a task of its own, so the wait can time out without
    cancelling the generator that makes it. Closed early (its client gone, a send cut),
    it cancels that task, which throws into `events` where it waits and runs its
    cleanup there; otherwise it closes `events`. Either way the cleanup runs to its end
    although the stream around it is being cancelled: it frees the response's slot,
    subscription and generation.
    """
    step: asyncio.Future[Event] | None = None
    try:
        while True:
            if step is None:
                step = asyncio.ensure_future(anext(events))
            done, _ = await asyncio.wait({step}, timeout=every_s)
            if not done:
                yield KEEPALIVE
                continue
            finished, step = step, None
            try:
                event = finished.result()
            except StopAsyncIteration:
                return
            yield event
    finally:
        with anyio.CancelScope(shield=True):
            if step is not None and not step.done():
                step.cancel()
                await asyncio.wait({step})
            else:
                await events.aclose()
            if step is not None:
                _settle(step)


def _settle(step: asyncio.Future[Any]) -> None:
    """Take the outcome of a step nobody will read, so that an error in the cleanup it
    ran is logged here, once, rather than as a never-retrieved task exception."""
    if step.cancelled():
        return
    error = step.exception()
    if error is not None and not isinstance(error, StopAsyncIteration):
        log.error("an event stream's cleanup failed", exc_info=error)
