"""Every follower of a response in one process shares one subscription and one read.

A resumed stream waits for its response's appends. Each one holding a pub/sub connection
of its own, and re-reading the list on each append, ties up a connection per reader and
multiplies the reads by the readers (300 readers of one response: 300 connections, past
the pool's size, and 300 reads an event). Here one dedicated connection subscribes to
each followed response's channel once; one task per followed response reads what was
appended, once, into a `Tail` every follower of it reads from memory. The tail goes when
its last follower does. A store that stops answering is retried for OUTAGE_S before the
followers are told.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

from redis.asyncio import Redis
from redis.asyncio.client import PubSub
from redis.exceptions import RedisError

from events.fold import TERMINAL_SSE_TYPES
from store.errors import StoreError, StoreUnavailable
from store.records import JSONObject
from store.redis_keys import PREFIX, ResponseKeys
from store.redis_scripts import translated_errors

log = logging.getLogger("spate.store")

# Subscribed for as long as the hub runs, so its connection is always open to read from.
HUB_CHANNEL = f"{PREFIX}:notify:hub"
# How long a tail waits for Redis to confirm its channel's subscription before its first
# read; past it the read goes on and the poll covers what a late subscription misses.
SUBSCRIBE_WAIT_S = 1.0
# A tail re-reads at least this often, in case a notification was lost (pub/sub does not
# queue messages across a reconnect).
POLL_S = 1.0
# How long a tail retries a store that does not answer before its followers are told.
OUTAGE_S = 10.0
RETRY_PAUSE_S = 0.2

# The SSE events of a response after a sequence_number (Store.sse_events).
ReadEvents = Callable[[str, int], Awaitable[list[JSONObject]]]


@dataclass(eq=False)
class Tail:
    """A followed response's SSE events read so far (list index = sequence_number)."""

    events: list[JSONObject] = field(default_factory=list)
    # Replaced on every change: a follower waits on the one it saw before looking.
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    ended: bool = False
    error: StoreError | None = None
    followers: int = 0
    task: asyncio.Task[None] | None = None

    def notify(self) -> None:
        changed, self.changed = self.changed, asyncio.Event()
        changed.set()


@dataclass(eq=False)
class _Channel:
    woken: asyncio.Event = field(default_factory=asyncio.Event)
    subscribed: asyncio.Event = field(default_factory=asyncio.Event)


class Tails:
    def __init__(self, redis: Redis, read: ReadEvents) -> None:
        self._redis = redis
        self._read = read
        self._pubsub: PubSub | None = None
        self._tails: dict[str, Tail] = {}
        self._channels: dict[str, _Channel] = {}
        self._listener: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()

    @property
    def followed(self) -> int:
        """Responses followed now (each one subscription and one reading task)."""
        return len(self._tails)

    @contextlib.asynccontextmanager
    async def follow(self, response_id: str) -> AsyncIterator[Tail]:
        """The response's shared tail, for as long as the caller follows it; raises
        StoreUnavailable when Redis cannot be subscribed to."""
        pubsub = await self._started()
        tail = self._tails.get(response_id)
        if tail is None:
            tail = self._tails[response_id] = Tail()
            tail.task = asyncio.create_task(self._run(response_id, tail, pubsub))
        tail.followers += 1
        try:
            yield tail
        finally:
            tail.followers -= 1
            if tail.followers == 0 and self._tails.get(response_id) is tail:
                del self._tails[response_id]
                if tail.task is not None:
                    tail.task.cancel()

    async def _started(self) -> PubSub:
        async with self._lock:
            if self._pubsub is None:
                pubsub = self._redis.pubsub()
                with translated_errors():
                    await pubsub.subscribe(HUB_CHANNEL)
                self._pubsub = pubsub
                self._listener = asyncio.create_task(self._listen(pubsub))
            return self._pubsub

    async def _run(self, response_id: str, tail: Tail, pubsub: PubSub) -> None:
        """Read the response's appends into its tail until the terminal event."""
        name = ResponseKeys(response_id).notify
        channel = self._channels[name] = _Channel()
        loop = asyncio.get_running_loop()
        try:
            with contextlib.suppress(RedisError, OSError, asyncio.TimeoutError):  # it polls
                await pubsub.subscribe(name)
                await asyncio.wait_for(channel.subscribed.wait(), SUBSCRIBE_WAIT_S)
            failing_since: float | None = None
            while not tail.ended:
                channel.woken.clear()
                try:
                    fresh = await self._read(response_id, len(tail.events) - 1)
                    failing_since = None
                except StoreUnavailable as error:
                    failing_since = failing_since or loop.time()
                    if loop.time() - failing_since < OUTAGE_S:
                        await asyncio.sleep(RETRY_PAUSE_S)
                        continue
                    tail.error = error
                except StoreError as error:
                    tail.error = error
                if tail.error is not None:
                    tail.notify()
                    return
                if fresh:
                    tail.events.extend(fresh)
                    tail.ended = fresh[-1]["type"] in TERMINAL_SSE_TYPES
                    tail.notify()
                    continue
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(channel.woken.wait(), POLL_S)
        finally:
            if self._channels.get(name) is channel:
                del self._channels[name]
                with contextlib.suppress(RedisError, OSError):
                    await pubsub.unsubscribe(name)

    async def _listen(self, pubsub: PubSub) -> None:
        while True:
            try:
                message = await pubsub.get_message(timeout=1.0)
            except asyncio.CancelledError:
                raise
            except Exception as error:  # Redis away: tails poll until it is back
                log.debug("notifications paused: %s", error)
                await asyncio.sleep(RETRY_PAUSE_S)
                continue
            if message is None:
                continue
            name = message["channel"]
            found = self._channels.get(name.decode() if isinstance(name, bytes) else str(name))
            if found is None:
                continue
            if message["type"] == "subscribe":
                found.subscribed.set()
            elif message["type"] == "message":
                found.woken.set()

    async def close(self) -> None:
        for tail in self._tails.values():
            if tail.task is not None:
                tail.task.cancel()
        if self._listener is not None:
            self._listener.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._listener
        if self._pubsub is not None:
            with contextlib.suppress(RedisError, OSError):
                await self._pubsub.aclose()  # type: ignore[no-untyped-call, unused-ignore]
