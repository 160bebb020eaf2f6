"""Keep-alives on an SSE response: a comment line each time the stream has been quiet
for the ping interval, framed so that no client reads it as an event.

The usual keep-alive (sse-starlette's ping) is a comment followed by a blank line, sent
on a timer, mid-stream too. A parser that follows the WHATWG algorithm to the letter
ignores it, but the official `openai` SDK's decoder (and httpx-sse's, which it derives
from) dispatches an event at every blank line once an `id:` line has been seen, since
the last event id is kept across events: the blank line after the comment then
dispatches an event with empty data, and the SDK's `json()` on it raises. Every stream
of this server carries ids (for Last-Event-ID), so every stream longer than the ping
interval broke the SDK.

The keep-alive here is the comment line alone. Sent between two events, it becomes the
first line of the next event's block, where every parser (the SDKs', httpx-sse's, a
browser's EventSource) skips comment lines; with no blank line of its own, nothing is
dispatched. A stream that ends after one ends on a complete line with no pending
fields, which a parser discards.
"""

from __future__ import annotations

import asyncio

from sse_starlette import EventSourceResponse
from sse_starlette.sse import SendTimeoutError
from starlette.types import Message, Send

# The line as it goes on the wire, ended with the separator the events are framed with.
KEEPALIVE = b": keep-alive" + EventSourceResponse.DEFAULT_SEPARATOR.encode()


class KeepAlives:
    """The ASGI `send` of one SSE response, with `run()` putting KEEPALIVE on it each
    time `every_s` seconds pass with nothing sent (never on a stream that keeps
    talking, never before the response starts or after it ends).

    The response sends through `send`; one lock orders its messages and the keep-alives,
    so a keep-alive never lands inside an event or after the last body. A keep-alive
    the client does not take within `send_timeout_s` (None: no limit) raises
    SendTimeoutError, which cuts the response as a stalled event send does.
    """

    def __init__(self, send: Send, every_s: float, send_timeout_s: float | None) -> None:
        self._send = send
        self._every_s = every_s
        self._send_timeout_s = send_timeout_s
        self._lock = asyncio.Lock()
        self._loop = asyncio.get_running_loop()
        self._last_sent = self._loop.time()
        self._started = False
        self._ended = False

    async def send(self, message: Message) -> None:
        async with self._lock:
            await self._send(message)
            if message["type"] == "http.response.start":
                self._started = True
            elif message["type"] == "http.response.body":
                self._last_sent = self._loop.time()
                self._ended = not message.get("more_body", False)

    async def run(self) -> None:
        """Send keep-alives until the response ends (or this task is cancelled with it)."""
        while not self._ended:
            await asyncio.sleep(self._last_sent + self._every_s - self._loop.time())
            if not self._started:
                self._last_sent = self._loop.time()
            elif self._loop.time() - self._last_sent >= self._every_s:
                await self._keep_alive()

    async def _keep_alive(self) -> None:
        async with self._lock:
            if self._ended:
                return
            message: Message = {"type": "http.response.body", "body": KEEPALIVE, "more_body": True}
            try:
                await asyncio.wait_for(self._send(message), self._send_timeout_s)
            except asyncio.TimeoutError:
                raise SendTimeoutError() from None
            self._last_sent = self._loop.time()
