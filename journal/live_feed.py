"""The one live subscription through which a process receives the events of every
response it follows, as the EVENTS stream republishes them once stored.

Live = log: the stream republishes each event it stored on `spate.events.<id>` to
`spate.live.events.<id>` (journal/topology.py), and never one it refused. A plain
subscription on `spate.events.<id>` would also receive refused publishes (a fenced stale
writer's, whose seqs the new writer fills differently), and the first copy of a seq is
the one a follower keeps. So followers read the live subjects only.

One wildcard subscription per process, made at the first follow and kept (the client
renews it after a reconnect), replaces a subscribe and an unsubscribe per response, which
a cluster floods to every server. Messages are handed to the followers of their subject
in process; those of responses nobody here follows are dropped on arrival.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from events.subjects import LIVE_EVENTS_SUBJECT_PREFIX, live_events_subject
from journal.connection import Connection

# Gets one stored event's payload; must not block (it runs on the subscription's task).
Sink = Callable[[bytes], None]


class LiveFeed:
    def __init__(self, connection: Connection) -> None:
        self._connection = connection
        # Live subject -> the sinks of the followers of that response in this process.
        self._sinks: dict[str, list[Sink]] = {}
        self._subscription: Subscription | None = None
        self._subscribing = asyncio.Lock()

    async def add(self, response_id: str, sink: Sink) -> None:
        """Hand `sink` every event of `response_id` stored from now on (and possibly a
        few stored just before: a reader orders and deduplicates by seq anyway).
        JournalUnavailable while NATS is away."""
        self._connection.require()
        await self._subscribe()
        self._sinks.setdefault(live_events_subject(response_id), []).append(sink)

    def remove(self, response_id: str, sink: Sink) -> None:
        subject = live_events_subject(response_id)
        sinks = self._sinks.get(subject)
        if sinks is None:
            return
        with contextlib.suppress(ValueError):
            sinks.remove(sink)
        if not sinks:
            del self._sinks[subject]

    @property
    def following(self) -> int:
        """How many responses have a follower here."""
        return len(self._sinks)

    async def _subscribe(self) -> None:
        async with self._subscribing:  # uncontended after the first follow: no wait
            if self._subscription is not None:
                return
            nc = self._connection.client()
            subscription = await nc.subscribe(f"{LIVE_EVENTS_SUBJECT_PREFIX}.>", cb=self._on_message)
            # The server holds the interest before the first request goes out; a message
            # it still misses (a cluster's route learning it later) is a gap the
            # follower repairs from the log.
            with contextlib.suppress(Exception):  # not fatal: repairs cover what it misses
                # nats-py annotates whole seconds but waits any float (asyncio.wait_for).
                await nc.flush(timeout=self._connection.settings.nats_timeout_s)  # type: ignore[arg-type]
            self._subscription = subscription

    async def _on_message(self, msg: Msg) -> None:
        # A callback subscription: cheaper on the hot path than iterating messages.
        sinks = self._sinks.get(msg.subject)
        if sinks is None:
            return
        for sink in sinks:
            sink(msg.data)
