"""Reading a stream's stored messages once, oldest first, up to the last one it held when
the read began: for rebuilding a projection from the log (`spate store rebuild`).

An ordered consumer (ephemeral, flow-controlled, re-created by the client from the last
stream sequence it saw if a message goes missing), so nothing is skipped or doubled;
messages written after the read began are left to the live consumers.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass

import nats
from nats.js import JetStreamContext
from nats.js.api import DeliverPolicy

from journal.errors import JournalUnavailable

# How long the read waits for the next message it knows is there before it gives up.
STALL_S = 10.0


@dataclass(frozen=True, slots=True)
class ReplayedMessage:
    stream_seq: int
    subject: str
    data: bytes


async def replay(js: JetStreamContext, stream: str, subject: str) -> AsyncIterator[ReplayedMessage]:
    """The messages of `stream` on `subject` (wildcards allowed), from the first stored to
    the stream's last sequence now. JournalUnavailable when NATS stops answering."""
    try:
        last = int((await js.stream_info(stream)).state.last_seq)
        subscription = await js.subscribe(
            subject, stream=stream, ordered_consumer=True, deliver_policy=DeliverPolicy.ALL
        )
    except Exception as error:
        raise JournalUnavailable(f"Could not read {stream}: {error}") from error
    try:
        info = await subscription.consumer_info()
        delivered = info.delivered.consumer_seq if info.delivered is not None else 0
        if not info.num_pending and not delivered:
            return  # nothing on the subject
        while True:
            try:
                msg = await subscription.next_msg(timeout=STALL_S)
            except (asyncio.TimeoutError, nats.errors.TimeoutError):
                raise JournalUnavailable(
                    f"Reading {stream} stalled for {STALL_S:g} s") from None
            seq = int(msg.metadata.sequence.stream)
            if seq > last:
                return
            yield ReplayedMessage(seq, msg.subject, msg.data)
            # Nothing after it matches (yet): a stream whose last messages are on other
            # subjects ends here, not at `last`.
            if seq == last or not msg.metadata.num_pending:
                return
    finally:
        with contextlib.suppress(Exception):
            await subscription.unsubscribe()
