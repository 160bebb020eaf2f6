"""Publishing one response's events: numbered by seq, deduplicated by Nats-Msg-Id, and
never one awaited JetStream ack per token."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from events import encode
from events.subjects import event_msg_id, events_subject

log = logging.getLogger("spate.worker.publisher")

PUBLISH_RETRIES = 5


class PublishFailed(Exception):
    """An event could not be persisted; the request must go back to the queue."""


class ResponsePublisher:
    def __init__(self, js: Any, response_id: str, next_seq: int) -> None:
        self._js = js
        self.response_id = response_id
        self.next_seq = next_seq
        self._subject = events_subject(response_id)
        self._pending: list[tuple[asyncio.Future[Any], Any]] = []

    async def publish(self, event_type: type, **fields: Any) -> Any:
        """Publish without waiting for JetStream's ack; `flush` waits for all of them."""
        event = event_type(response_id=self.response_id, seq=self.next_seq, **fields)
        self.next_seq += 1
        future = await self._js.publish_async(
            self._subject, encode(event),
            headers={"Nats-Msg-Id": event_msg_id(self.response_id, event.seq)},
        )
        self._pending.append((future, event))
        if len(self._pending) > 256:
            await self._settle(done_only=True)
        return event

    async def flush(self, timeout: float = 10.0) -> None:
        """Wait until every event so far is persisted; republish the ones that were not."""
        await self._settle(done_only=False, timeout=timeout)

    async def _settle(self, done_only: bool, timeout: float = 10.0) -> None:
        if not done_only and self._pending:
            await asyncio.wait([future for future, _ in self._pending], timeout=timeout)
        keep: list[tuple[asyncio.Future[Any], Any]] = []
        for future, event in self._pending:
            if not future.done():
                if done_only:
                    keep.append((future, event))
                    continue
                future.cancel()
                await self._republish(event)
            elif future.cancelled() or future.exception() is not None:
                await self._republish(event)
        self._pending = keep

    async def _republish(self, event: Any) -> None:
        # The Nats-Msg-Id makes this safe even when the first publish did land.
        for attempt in range(PUBLISH_RETRIES):
            try:
                await self._js.publish(
                    self._subject, encode(event),
                    headers={"Nats-Msg-Id": event_msg_id(self.response_id, event.seq)},
                )
                return
            except Exception as error:
                log.warning("republish of %s:%d failed (%s)", self.response_id, event.seq, error)
                await asyncio.sleep(0.2 * (attempt + 1))
        raise PublishFailed(f"could not persist event {event.seq} of {self.response_id}")
