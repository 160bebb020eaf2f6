"""One response being generated, as the Responses events its client is sent: the log
folded event by event, with orphan detection and a shutdown's cut. A transport (SSE, a
JSON body, a WebSocket) reads it and frames what it reads; none folds the log itself."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from api.errors import bus_unavailable
from api.guards.admission import Admission, Slot
from api.guards.drain import SHUTTING_DOWN, Drain
from api.metrics import ResponseTimer
from api.streaming.orphans import local_failure, orphaned
from events import RequestAccepted, ResponseFold, TokensGenerated, error_fields
from events.generation import Usage
from journal import Journal, JournalUnavailable, LogFollower

# Applied to each event and to the Response before they go out: adds what only the API
# process can (api/lowering/encrypted_content.py seals reasoning items).
Outgoing = Callable[[dict[str, Any]], dict[str, Any]]

# How long the fold waits for the log before looking at the response's health, a
# shutdown's cut and (for a JSON body) the client's connection.
IDLE_S = 1.0


class LiveResponse:
    """The Responses events of one response as the log gives them.

    `next_batch()` is the fold step: the events one log event produces, `[]` after an
    idle second, None once the response is done. Iterating gives the events one by one
    and stops at the end or at a shutdown's cut (`cut` then tells, and `cut_notice()` is
    the last event to send); they go out with `outgoing` applied, while `state` holds the fold as the log gives it. `serving()` holds the response open for the drain and
    gives back its admission slot and subscription when the client goes.
    """

    def __init__(
        self, follower: LogFollower, journal: Journal, slot: Slot, response_id: str,
        drain: Drain, timer: ResponseTimer | None = None, outgoing: Outgoing | None = None,
    ) -> None:
        self.response_id = response_id
        self.outgoing = outgoing
        self.state = ResponseFold()
        self.cut = False
        self._follower = follower
        self._journal = journal
        # Public for the transport, which gives it back too should serving never start.
        self.slot = slot
        self._drain = drain
        self._timer = timer
        self._loop = asyncio.get_running_loop()
        self._last_event_at = self._loop.time()
        self._failed = False
        self._fetched = False
        self._pending: deque[dict[str, Any]] = deque()
        # Told the usage once serving ends (None unless the response ended): its rate
        # limit's true-up (api/guards/rate_limits.py).
        self.on_end: Callable[[Usage | None], None] | None = None

    async def next_batch(self) -> list[dict[str, Any]] | None:
        """The events the next log event produces, `[]` after an idle second, or None
        once the response is done.

        A lost bus, or a request whose model lost its last worker, becomes a
        generation.failed, so clients see `error` and `response.failed`, never a hang.
        """
        state = self.state
        while not state.done and not self._failed:
            try:
                event = await self._follower.next(timeout=IDLE_S)
                if event is None and state.request is not None and self._journal.connected:
                    quiet_s = self._loop.time() - self._last_event_at
                    failure = await orphaned(state, self._journal, quiet_s)
                    if failure is not None:
                        self._failed = True
                        return state.apply(failure)
            except JournalUnavailable as error:
                self._failed = True
                return state.apply(local_failure(state, "bus_unavailable", bus_unavailable(error)))
            if event is None:
                return []
            self._last_event_at = self._loop.time()
            if self._timer is not None and type(event) is TokensGenerated:
                self._timer.tokens(len(event.token_ids), self._last_event_at)
            produced = state.apply(event)
            if produced:
                return produced
        if self._timer is not None and not self._failed:
            self._timer.finish()
        return None

    def __aiter__(self) -> LiveResponse:
        return self

    async def __anext__(self) -> dict[str, Any]:
        while not self._pending:
            if self._fetched and self.shutdown_cut and not self.state.done:
                self.cut = True
                raise StopAsyncIteration
            batch = await self.next_batch()
            if batch is None:
                raise StopAsyncIteration
            self._fetched = True
            self._pending.extend(batch)
        return self.going_out(self._pending.popleft())

    def going_out(self, payload: dict[str, Any]) -> dict[str, Any]:
        """An event or the Response as it goes out (`outgoing` applied)."""
        return self.outgoing(payload) if self.outgoing else payload

    @property
    def shutdown_cut(self) -> bool:
        """Whether a shutdown past its drain timeout has cut the open responses."""
        return self._drain.cut.is_set()

    @property
    def last_sequence_number(self) -> int:
        return len(self.state.sse_events) - 1

    def cut_notice(self) -> dict[str, Any]:
        """The last event of a stream cut by a shutdown: an `error` the SDK knows, naming
        the event to resume after. The response itself goes on in its worker."""
        return cut_notice_after(self.last_sequence_number, self.response_id)

    def cancel_for_disconnect(self) -> None:
        """The client went before the end: stop the generation."""
        self._journal.cancel_soon(self.response_id, "client_disconnected")

    @asynccontextmanager
    async def serving(self, cancel_unfinished: bool) -> AsyncIterator[LiveResponse]:
        """Count the response open in the drain while a client reads it; then give back
        its slot and subscription, and cancel its generation when the client went before
        the end (`cancel_unfinished`) and no shutdown cut it."""
        try:
            with self._drain.track():
                yield self
        finally:
            self.slot.release()
            if self.on_end is not None:
                self.on_end(self.state.usage if self.state.done else None)
            # Before the one await: a client gone cancels the stream around this, and
            # anyio cancels each await of its cleanup again.
            if not self.state.done and cancel_unfinished and not self.cut:
                self.cancel_for_disconnect()
            await self._follower.close()


def cut_notice_after(last: int, response_id: str) -> dict[str, Any]:
    """The cut notice of a stream whose last event sent was number `last`."""
    message = (f"The server is shutting down, so this stream was cut after event {last}; "
               f"the response goes on. Resume it with GET /v1/responses/{response_id}"
               f"?stream=true&starting_after={last} (with the response store on).")
    return {"type": "error", "sequence_number": last + 1,
            **error_fields(SHUTTING_DOWN, message, None)}


async def open_live_response(
    journal: Journal, admission: Admission, event: RequestAccepted, traceparent: str | None,
    drain: Drain, *, claim: bool, timer: ResponseTimer | None = None,
    outgoing: Outgoing | None = None,
) -> LiveResponse:
    """Take an admission slot (the replica's and its owner's), follow the response's log,
    then publish its request (with `claim`, claiming a client-chosen id): the first event
    cannot be missed. A failure before the publish gives both back."""
    slot = admission.admit(event.owner)
    follower = None
    try:
        follower = await journal.follow(event.response_id)
        await journal.publish_request(event, traceparent, claim=claim)
    except BaseException:
        slot.release()
        if follower is not None:
            await follower.close()
        raise
    return LiveResponse(follower, journal, slot, event.response_id, drain, timer, outgoing)
