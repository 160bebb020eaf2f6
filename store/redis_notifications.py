"""One Redis subscription per process for every follower of every response.

A resumed stream waits for its response's appends. Each one holding a pub/sub
connection of its own would tie up a connection per reader (300 readers of one response:
300 connections, past the pool's size). Here one dedicated connection subscribes to each
followed response's channel once, however many read it, and wakes them all; the channel
is dropped when its last reader goes. The pool is left to short reads.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from redis.asyncio import Redis
from redis.asyncio.client import PubSub
from redis.exceptions import RedisError

from store.redis_keys import PREFIX
from store.redis_scripts import translated_errors

log = logging.getLogger("spate.store")

# Subscribed for as long as the hub runs, so its connection is always open to read from.
HUB_CHANNEL = f"{PREFIX}:notify:hub"
# How long a new reader waits for Redis to confirm its channel's subscription; past it
# the reader goes on and its poll covers what a late subscription misses.
SUBSCRIBE_WAIT_S = 1.0
# The pause before reading again after the connection failed (Redis restarting).
RECONNECT_PAUSE_S = 0.5


@dataclass(slots=True)
class _Channel:
    readers: set[asyncio.Event] = field(default_factory=set)
    subscribed: asyncio.Event = field(default_factory=asyncio.Event)


class Notifications:
    """Readers `watch` a channel and get an Event that is set on each message to it."""

    def __init__(self, redis: Redis) -> None:
        self._redis = redis
        self._pubsub: PubSub | None = None
        self._channels: dict[str, _Channel] = {}
        self._reader: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()

    @property
    def channels(self) -> int:
        """Channels subscribed for readers now (the hub's own not counted)."""
        return len(self._channels)

    async def _started(self) -> PubSub:
        async with self._lock:
            if self._pubsub is None:
                pubsub = self._redis.pubsub()
                with translated_errors():
                    await pubsub.subscribe(HUB_CHANNEL)
                self._pubsub = pubsub
                self._reader = asyncio.create_task(self._read(pubsub))
            return self._pubsub

    @contextlib.asynccontextmanager
    async def watch(self, channel: str) -> AsyncIterator[asyncio.Event]:
        """An Event set whenever `channel` gets a message, subscribed (or waited on for
        SUBSCRIBE_WAIT_S) before this yields; raises StoreUnavailable when Redis is away."""
        pubsub = await self._started()
        woken = asyncio.Event()
        entry = self._channels.get(channel)
        if entry is None:
            entry = self._channels[channel] = _Channel()
            try:
                with translated_errors():
                    await pubsub.subscribe(channel)
            except BaseException:
                if not entry.readers:
                    self._channels.pop(channel, None)
                raise
        entry.readers.add(woken)
        try:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(entry.subscribed.wait(), SUBSCRIBE_WAIT_S)
            yield woken
        finally:
            entry.readers.discard(woken)
            if not entry.readers and self._channels.get(channel) is entry:
                del self._channels[channel]
                with contextlib.suppress(RedisError, OSError):
                    await pubsub.unsubscribe(channel)

    async def _read(self, pubsub: PubSub) -> None:
        while True:
            try:
                message = await pubsub.get_message(timeout=1.0)
            except asyncio.CancelledError:
                raise
            except Exception as error:  # Redis away: readers poll until it is back
                log.debug("notifications paused: %s", error)
                for entry in self._channels.values():
                    entry.subscribed.clear()
                await asyncio.sleep(RECONNECT_PAUSE_S)
                continue
            if message is None:
                continue
            channel = message["channel"]
            name = channel.decode() if isinstance(channel, bytes) else str(channel)
            found = self._channels.get(name)
            if found is None:
                continue
            if message["type"] == "subscribe":
                found.subscribed.set()
            elif message["type"] == "message":
                for woken in found.readers:
                    woken.set()

    async def close(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader
        if self._pubsub is not None:
            with contextlib.suppress(RedisError, OSError):
                await self._pubsub.aclose()  # type: ignore[no-untyped-call, unused-ignore]
