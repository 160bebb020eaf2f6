"""A durable pull consumer that several processes share, and the deliveries it hands out.

The workers of a model share one on the REQUESTS stream (ack only once the terminal
event is persisted, heartbeat while generating, hand back on drain); the store's
projectors share one on the EVENTS stream."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

import nats
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import ConsumerConfig

from journal.connection import Connection
from journal.errors import JournalUnavailable
from journal.topology import declare_consumer
from journal.trace_context import TRACEPARENT_HEADER

log = logging.getLogger("spate.journal.consumer")


@dataclass(slots=True)
class Delivery:
    """One delivery of a request message."""

    data: bytes
    # 1 for the first delivery; more when a worker before this one did not finish it.
    num_delivered: int
    _msg: Msg

    @property
    def subject(self) -> str:
        return str(self._msg.subject)

    @property
    def traceparent(self) -> str | None:
        """The W3C trace context the request was published with, if any."""
        headers = self._msg.headers or {}
        value = headers.get(TRACEPARENT_HEADER)
        return str(value) if value else None

    async def ack(self) -> None:
        """Done: wait until JetStream has recorded it."""
        await self._msg.ack_sync()

    async def ack_soon(self) -> None:
        """Done, without waiting for JetStream to confirm it (for idempotent consumers,
        to whom a lost ack costs only a redelivery)."""
        await self._msg.ack()

    async def nak(self, delay: float | None = None) -> None:
        """Hand it back for another worker (after `delay` seconds)."""
        await self._msg.nak(delay=delay)

    async def in_progress(self) -> None:
        """Still working on it: restart the ack-wait clock."""
        await self._msg.in_progress()

    async def term(self) -> None:
        """Never deliver it again (it cannot be decoded)."""
        await self._msg.term()


class DurableConsumer:
    def __init__(self, connection: Connection, stream: str, config: ConsumerConfig) -> None:
        self._connection = connection
        self._stream = stream
        self._config = config
        self._subscription: JetStreamContext.PullSubscription | None = None

    async def open(self) -> None:
        """Declare the consumer and bind to it; again after NATS came back empty."""
        js = self._connection.require()
        await declare_consumer(js, self._stream, self._config)
        self._subscription = await js.pull_subscribe_bind(
            durable=self._config.durable_name, stream=self._stream
        )
        if self.redeclare not in self._connection.on_declared:
            self._connection.on_declared.append(self.redeclare)

    async def redeclare(self) -> None:
        await declare_consumer(self._connection.require(), self._stream, self._config)

    async def fetch(self, batch: int, timeout: float) -> list[Delivery]:
        """Up to `batch` messages, or none after `timeout` seconds (or while NATS is away)."""
        try:
            if self._subscription is None:
                raise JournalUnavailable(f"{self._config.durable_name} is not open")
            messages = await self._subscription.fetch(batch=batch, timeout=timeout)
        except (asyncio.TimeoutError, nats.errors.TimeoutError):
            return []
        except Exception as error:  # NATS away, or the consumer gone with a restart
            log.warning("fetching from %s failed: %s", self._config.durable_name, error)
            await asyncio.sleep(timeout)
            return []
        return [Delivery(msg.data, msg.metadata.num_delivered, msg) for msg in messages]

    async def close(self) -> None:
        if self._subscription is not None:
            try:
                await self._subscription.unsubscribe()
            except Exception as error:
                log.debug("unsubscribing from %s: %s", self._config.durable_name, error)
        if self.redeclare in self._connection.on_declared:
            self._connection.on_declared.remove(self.redeclare)

