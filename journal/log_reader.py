"""Reading what a response's log already holds: its last seq, whether it exists, every
stored event in seq order, and whether a cancel was written. One reader for all callers:
the API's gap repair and resumption, a replacement worker, the store's projection."""

from __future__ import annotations

import asyncio
import contextlib

from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import DeliverPolicy
from nats.js.errors import NotFoundError

from events import AnyEvent, decode
from events.ordering import SeqOrder
from events.subjects import EVENTS_STREAM, cancel_subject, events_subject
from journal.errors import JournalUnavailable


async def last_seq(js: JetStreamContext, response_id: str) -> int:
    """The highest seq stored in the response's log, or -1 when it has none."""
    try:
        msg = await js.get_last_msg(EVENTS_STREAM, events_subject(response_id))
    except NotFoundError:
        return -1
    except Exception as error:
        raise JournalUnavailable(f"Could not read the event log: {error}") from error
    return int(decode(msg.data or b"").seq)


async def cancel_requested(js: JetStreamContext, response_id: str) -> bool:
    try:
        await js.get_last_msg(EVENTS_STREAM, cancel_subject(response_id))
    except NotFoundError:
        return False
    except Exception as error:
        raise JournalUnavailable(f"Could not read the event log: {error}") from error
    return True


async def read_log(js: JetStreamContext, response_id: str, timeout: float = 5.0) -> list[AnyEvent]:
    """Every stored event of the response, in seq order from 0, each once.

    An ordered consumer reads the subject from its first message; the read ends when the
    consumer has nothing pending, so it never waits for events that do not exist. Events
    past a gap (one not stored yet) are left out: the result is always a prefix of the log.
    """
    if await last_seq(js, response_id) < 0:
        return []
    order = SeqOrder()
    events: list[AnyEvent] = []
    complete = asyncio.Event()

    async def on_message(msg: Msg) -> None:
        events.extend(order.push(decode(msg.data)))
        if msg.metadata.num_pending == 0:
            complete.set()

    try:
        subscription = await js.subscribe(
            events_subject(response_id), stream=EVENTS_STREAM, cb=on_message,
            ordered_consumer=True, deliver_policy=DeliverPolicy.ALL,
        )
    except Exception as error:
        raise JournalUnavailable(f"Could not read the event log: {error}") from error
    try:
        await asyncio.wait_for(complete.wait(), timeout)
    except asyncio.TimeoutError:
        raise JournalUnavailable(
            f"Reading the event log of {response_id} took over {timeout}s."
        ) from None
    finally:
        with contextlib.suppress(Exception):
            await subscription.unsubscribe()
    return events
