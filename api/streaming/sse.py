"""Server-sent events: a live response and a stored one resumed, framed the one way
(each event with its sequence number as its id, so a client can resume by
Last-Event-ID), and a shutdown's cut notice without one."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncGenerator
from typing import Any

import anyio
from sse_starlette import EventSourceResponse, ServerSentEvent
from sse_starlette.sse import SendTimeoutError

from api.guards.admission import Slot
from api.guards.drain import Drain
from api.settings import ApiSettings
from api.streaming.keepalive import KeepAlives
from api.streaming.live_response import LiveResponse, cut_notice_after
from events import TERMINAL_SSE_TYPES
from store import Store, StoreError

log = logging.getLogger("spate.api")

# A resumed stream with nothing new for this long ends (keep-alives go out meanwhile).
FOLLOW_IDLE_S = 600.0
# The most a resumed stream's cleanup (closing its follow of the store) may take.
CLEANUP_S = 10.0


def server_sent_event(sse: dict[str, Any]) -> ServerSentEvent:
    """One SSE event as it goes on the wire; a replayed log renders through this too."""
    return ServerSentEvent(
        data=json.dumps(sse, separators=(",", ":")), event=sse["type"],
        id=str(sse["sequence_number"]),
    )


def stream_end() -> ServerSentEvent:
    """What follows a stream's terminal event: the Open Responses specification ends a
    stream with a literal `data: [DONE]` (the SDKs stop reading at it)."""
    return ServerSentEvent(data="[DONE]")


def cut_event(notice: dict[str, Any]) -> ServerSentEvent:
    """A cut notice on the wire. No SSE id: a client resuming by Last-Event-ID resumes
    after the last event of the log it got, not after this notice."""
    return ServerSentEvent(data=json.dumps(notice, separators=(",", ":")), event="error")


class CuttableStream(EventSourceResponse):
    """An SSE response with keep-alives while it is quiet, whose client is cut when it
    takes no event (or keep-alive) for `send_timeout` seconds. The cut closes the event
    generator (its `finally` cancels the generation and frees the slot) and is logged as
    one line, not as an application error; so is a client that goes before the end.
    `slot` is given back when the response ends whatever happened: a client gone before
    the event generator started would otherwise hold its key's slot for good."""

    def __init__(
        self, response_id: str, slot: Slot, events: AsyncGenerator[ServerSentEvent, None],
        settings: ApiSettings,
    ) -> None:
        # sse-starlette's own ping (ping=0 turns it off) goes out on a timer, mid-stream
        # too, framed so that the official SDK breaks on it: see api/streaming/keepalive.py.
        super().__init__(events, ping=0, send_timeout=settings.sse_send_timeout_s,
                         client_close_handler_callable=self._client_went)
        self.response_id = response_id
        self.slot = slot
        self.ping_s = settings.sse_ping_s
        self.client_gone = False

    async def _client_went(self, _: Any) -> None:
        self.client_gone = True

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        keepalives = KeepAlives(send, self.ping_s, self.send_timeout)
        # Run beside the event stream, and cancelled with it, by sse-starlette.
        self.data_sender_callable = keepalives.run
        try:
            await super().__call__(scope, receive, keepalives.send)
        except SendTimeoutError:
            log.warning("cut the stream of %s: its client took no event for %g s",
                        self.response_id, self.send_timeout)
        finally:
            self.slot.release()
        if self.client_gone:
            log.info("the client of %s went before the end of its stream", self.response_id)


def live_sse_reply(
    live: LiveResponse, settings: ApiSettings, cancel_on_disconnect: bool
) -> CuttableStream:
    """The stream of a response being created; a client that goes before the end
    cancels it unless `cancel_on_disconnect` is off (a background response)."""
    return CuttableStream(
        live.response_id, live.slot, live_sse(live, cancel_on_disconnect), settings
    )


async def live_sse(
    live: LiveResponse, cancel_on_disconnect: bool
) -> AsyncGenerator[ServerSentEvent, None]:
    async with live.serving(cancel_unfinished=cancel_on_disconnect):
        async for sse in live:
            yield server_sent_event(sse)
            if sse["type"] in TERMINAL_SSE_TYPES:
                yield stream_end()
        if live.cut:
            yield cut_event(live.cut_notice())


def resumed_sse_reply(
    store: Store, response_id: str, after: int, drain: Drain, settings: ApiSettings,
    slot: Slot,
) -> CuttableStream:
    """The stream of a stored response from the event after `after`, holding `slot` (its
    key's resumed streams) until it ends."""
    return CuttableStream(
        response_id, slot, resumed_sse(store, response_id, after, drain, slot), settings
    )


async def resumed_sse(
    store: Store, response_id: str, after: int, drain: Drain, slot: Slot
) -> AsyncGenerator[ServerSentEvent, None]:
    """The stored events after `after`, then the live ones until the terminal event. Any
    replica can serve it: the projection is shared. A shutdown drains it as it drains a
    stream being created: past the drain timeout it ends with a notice naming where to
    resume, while waiting for the next event too. A store that stops answering ends it
    with a notice naming where to resume, not a dropped connection."""
    last = after
    follow = store.follow_sse(response_id, after, idle_timeout_s=FOLLOW_IDLE_S)
    cut = asyncio.ensure_future(drain.cut.wait())
    next_event: asyncio.Future[dict[str, Any]] | None = None
    try:
        with drain.track():
            while True:
                next_event = asyncio.ensure_future(follow.__anext__())
                await asyncio.wait({next_event, cut}, return_when=asyncio.FIRST_COMPLETED)
                if not next_event.done():
                    next_event.cancel()
                    await asyncio.wait({next_event})
                    yield cut_event(cut_notice_after(last, response_id))
                    return
                try:
                    sse = next_event.result()
                except (StopAsyncIteration, TimeoutError):
                    return
                except StoreError as error:
                    log.warning("resumed stream of %s ended: %s", response_id, error)
                    yield cut_event(store_lost_notice(last, response_id))
                    return
                last = sse["sequence_number"]
                yield server_sent_event(sse)
                if sse["type"] in TERMINAL_SSE_TYPES:
                    yield stream_end()
                    return
    finally:
        slot.release()
        cut.cancel()
        # Shielded: when the stream around it is cancelled (its client gone), anyio
        # cancels each wait here again, which would leave the follow open; bounded, so a
        # stuck store cannot hold the response. The follow may be mid-step: that step
        # ends first, as closing a generator still running raises.
        with anyio.move_on_after(CLEANUP_S, shield=True):
            if next_event is not None and not next_event.done():
                next_event.cancel()
                await asyncio.wait({next_event})
            close = getattr(follow, "aclose", None)
            if close is not None:
                await close()


def store_lost_notice(last: int, response_id: str) -> dict[str, Any]:
    """The last event of a resumed stream whose store stopped answering."""
    return {
        "type": "error", "code": "store_unavailable", "param": None, "sequence_number": last + 1,
        "message": (f"The response store is unavailable, so this stream ended after event "
                    f"{last}; the response goes on. Resume it with GET /v1/responses/"
                    f"{response_id}?stream=true&starting_after={last}."),
    }
