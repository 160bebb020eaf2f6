"""Following a stream as it is written: every response's events, one model's requests or
one response's log from its start. For people (`spate events tail`) and for consumers
outside the request path (examples/); never on the hot path."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass

from nats.js import JetStreamContext
from nats.js.api import DeliverPolicy

from events import AnyEvent, EventDecodeError, decode
from journal.errors import JournalUnavailable


@dataclass(frozen=True, slots=True)
class TailedMessage:
    subject: str
    data: bytes
    # The decoded (and upcast) event; None when this code cannot read it.
    event: AnyEvent | None
    error: str | None = None


async def tail(js: JetStreamContext, stream: str, subject: str, from_start: bool) -> AsyncIterator[TailedMessage]:
    """Messages of `stream` on `subject` (wildcards allowed) in stream order, from the first
    stored one or from now on, until the caller stops iterating.

    An ordered consumer: ephemeral, flow-controlled, and re-created by the client from the
    last stream sequence it saw if a message goes missing, so nothing is skipped or doubled.
    """
    policy = DeliverPolicy.ALL if from_start else DeliverPolicy.NEW
    try:
        subscription = await js.subscribe(
            subject, stream=stream, ordered_consumer=True, deliver_policy=policy
        )
    except Exception as error:
        raise JournalUnavailable(f"Could not follow {subject}: {error}") from error
    try:
        while True:
            try:
                msg = await subscription.next_msg(timeout=1.0)
            except (asyncio.TimeoutError, TimeoutError):
                continue
            try:
                yield TailedMessage(msg.subject, msg.data, decode(msg.data))
            except EventDecodeError as error:
                yield TailedMessage(msg.subject, msg.data, None, str(error))
    finally:
        with contextlib.suppress(Exception):
            await subscription.unsubscribe()
