"""The workers' side of the REQUESTS stream: one durable pull consumer per model that all
of its workers share, and the deliveries it hands out (ack only once the terminal event
is persisted, heartbeat while generating, hand back on drain)."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

import nats

from events.subjects import REQUESTS_STREAM
from journal.connection import Connection
from journal.topology import declare_request_consumer, request_consumer_config

log = logging.getLogger("spate.journal.requests")


@dataclass(slots=True)
class Delivery:
    """One delivery of a request message."""

    data: bytes
    # 1 for the first delivery; more when a worker before this one did not finish it.
    num_delivered: int
    _msg: Any

    async def ack(self) -> None:
        """Done: wait until JetStream has recorded it."""
        await self._msg.ack_sync()

    async def nak(self, delay: float | None = None) -> None:
        """Hand it back for another worker (after `delay` seconds)."""
        await self._msg.nak(delay=delay)

    async def in_progress(self) -> None:
        """Still working on it: restart the ack-wait clock."""
        await self._msg.in_progress()

    async def term(self) -> None:
        """Never deliver it again (it cannot be decoded)."""
        await self._msg.term()


class RequestQueue:
    def __init__(
        self, connection: Connection, model: str, ack_wait_s: float, max_deliver: int
    ) -> None:
        self._connection = connection
        self._config = request_consumer_config(model, ack_wait_s, max_deliver)
        self._subscription: Any = None

    async def open(self) -> None:
        """Declare the consumer and bind to it; again after NATS came back empty."""
        js = self._connection.require()
        await declare_request_consumer(js, self._config)
        self._subscription = await js.pull_subscribe_bind(
            durable=self._config.durable_name, stream=REQUESTS_STREAM
        )
        if self.redeclare not in self._connection.on_declared:
            self._connection.on_declared.append(self.redeclare)

    async def redeclare(self) -> None:
        await declare_request_consumer(self._connection.require(), self._config)

    async def fetch(self, batch: int, timeout: float) -> list[Delivery]:
        """Up to `batch` requests, or none after `timeout` seconds (or while NATS is away)."""
        try:
            messages = await self._subscription.fetch(batch=batch, timeout=timeout)
        except (asyncio.TimeoutError, nats.errors.TimeoutError):
            return []
        except Exception as error:  # NATS away, or the consumer gone with a restart
            log.warning("fetching requests failed: %s", error)
            await asyncio.sleep(timeout)
            return []
        return [Delivery(msg.data, msg.metadata.num_delivered, msg) for msg in messages]

    async def close(self) -> None:
        if self._subscription is not None:
            try:
                await self._subscription.unsubscribe()
            except Exception as error:
                log.debug("unsubscribing from requests: %s", error)
        if self.redeclare in self._connection.on_declared:
            self._connection.on_declared.remove(self.redeclare)

