"""Following one response's log live, in seq order, as the API streams it.

The live tail comes from the process's one `LiveFeed` (what the stream republishes once
stored: no server-side consumer per response, which keeps the first event fast under
load, and never a publish the stream refused). A core NATS delivery can be missed (a
reconnect, a slow consumer, events stored before the follow began), so a gap in `seq`,
or a quiet stream, is checked against the stored log and repaired from it: nothing lost,
nothing twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from events import AnyEvent, decode
from events.ordering import SeqOrder
from journal.connection import Connection
from journal.errors import JournalUnavailable
from journal.live_feed import LiveFeed
from journal.log_reader import last_seq, read_log

log = logging.getLogger("spate.journal.follower")

# How long an out-of-order event may wait for the one before it before the log is read.
GAP_PATIENCE_S = 0.25
# Events held for a reader that does not keep up; past it they are dropped and read back
# from the log when the reader catches up, so a slow client costs bounded memory.
BUFFERED_EVENTS = 1024
# A quiet stream checks the log for a missed tail after one quiet wait, then after twice
# as long each time nothing was missed, up to this: a thousand streams queued behind a
# busy worker would otherwise ask NATS for their logs a thousand times a second.
MAX_QUIET_CHECK_S = 4.0
# Log reads (gap and quiet-tail repairs) one process runs at once; the rest wait their
# turn, and a follower whose live events came while it waited skips its read.
REPAIRS_AT_ONCE = 16


class LogFollower:
    def __init__(
        self, connection: Connection, feed: LiveFeed, response_id: str,
        repairs: asyncio.Semaphore,
    ) -> None:
        self._connection = connection
        self._feed = feed
        self.response_id = response_id
        self._queue: asyncio.Queue[bytes] = asyncio.Queue(maxsize=BUFFERED_EVENTS)
        self._order = SeqOrder()
        self._ready: list[AnyEvent] = []
        self._following = False
        self._repairs = repairs
        # When a quiet stream next checks the log, and how long it waits after that.
        self._quiet_check_at = 0.0
        self._quiet_check_s = 0.0

    async def start(self) -> None:
        await self._feed.add(self.response_id, self._on_event)
        self._following = True

    def _on_event(self, data: bytes) -> None:
        with contextlib.suppress(asyncio.QueueFull):  # the log has it; see _repair
            self._queue.put_nowait(data)

    async def next(self, timeout: float) -> AnyEvent | None:
        """The next event, or None when none came within `timeout` seconds.

        While NATS is away (a restart) it keeps returning None, for up to the outage
        allowance; the subscription comes back with the connection and the log fills
        what was missed. Past the allowance it raises JournalUnavailable, so a stream
        ends with an error instead of hanging.
        """
        loop = asyncio.get_running_loop()
        while not self._ready:
            wait = GAP_PATIENCE_S if self._order.waiting else timeout
            try:
                data = await asyncio.wait_for(self._queue.get(), wait)
            except asyncio.TimeoutError:
                if not self._connection.connected:
                    if self._connection.outage_s() < self._connection.settings.nats_outage_s:
                        return None
                    raise JournalUnavailable(
                        "Lost the connection to the message bus (NATS)."
                    ) from None
                if not self._order.waiting and loop.time() < self._quiet_check_at:
                    return None
                if await self._repair():
                    self._quiet_check_s = 0.0
                    continue
                self._quiet_check_s = min(max(2 * self._quiet_check_s, timeout), MAX_QUIET_CHECK_S)
                self._quiet_check_at = loop.time() + self._quiet_check_s
                return None
            self._quiet_check_s = self._quiet_check_at = 0.0
            self._ready.extend(self._order.push(decode(data)))
        return self._ready.pop(0)

    async def _repair(self) -> bool:
        """Fill a gap from the stored log; True when there may be events to take now.

        A read that fails while the connection is up (NATS slow under load) is not the
        stream's end: the follower waits and checks again, and the caller's own checks
        (a worker gone, the bus gone) still end a stream that cannot go on."""
        async with self._repairs:
            if not self._queue.empty():  # the live events came while this waited
                return True
            js = self._connection.require()
            try:
                if await last_seq(js, self.response_id) < self._order.next_seq:
                    return False
                for event in await read_log(js, self.response_id):
                    self._ready.extend(self._order.push(event))
            except JournalUnavailable as error:
                if not self._connection.connected:
                    raise
                log.warning("could not read the log of %s yet: %s", self.response_id, error)
                return False
        return bool(self._ready)

    async def close(self) -> None:
        if self._following:
            self._feed.remove(self.response_id, self._on_event)
            self._following = False
