"""Reading back what a response's log already holds, for a redelivered request.

A replacement worker continues a dead worker's response from the next seq, with the
token ids already emitted, so the client sees one uninterrupted stream.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from typing import Any

from nats.js.api import DeliverPolicy
from nats.js.errors import NotFoundError

from events import GenerationFailed, GenerationFinished, TokensGenerated, decode
from events.ordering import SeqOrder
from events.subjects import EVENTS_STREAM, cancel_subject, events_subject


@dataclass(slots=True)
class PriorProgress:
    next_seq: int = 1
    output_token_ids: list[int] = field(default_factory=list)
    finished: bool = False
    started: bool = False


async def cancel_requested(js: Any, response_id: str) -> bool:
    with contextlib.suppress(NotFoundError):
        await js.get_last_msg(EVENTS_STREAM, cancel_subject(response_id))
        return True
    return False


async def read_progress(js: Any, response_id: str, timeout: float = 5.0) -> PriorProgress:
    subject = events_subject(response_id)
    try:
        last = await js.get_last_msg(EVENTS_STREAM, subject)
    except NotFoundError:
        return PriorProgress()
    last_seq = decode(last.data).seq
    progress = PriorProgress()
    order = SeqOrder()
    complete = asyncio.Event()

    async def on_message(msg: Any) -> None:
        for event in order.push(decode(msg.data)):
            if isinstance(event, TokensGenerated):
                progress.output_token_ids.extend(event.token_ids)
                progress.started = True
            elif isinstance(event, (GenerationFinished, GenerationFailed)):
                progress.finished = True
            if event.seq >= last_seq:
                complete.set()

    subscription = await js.subscribe(
        subject, stream=EVENTS_STREAM, cb=on_message, ordered_consumer=True,
        deliver_policy=DeliverPolicy.ALL,
    )
    try:
        await asyncio.wait_for(complete.wait(), timeout)
    finally:
        await subscription.unsubscribe()
    progress.next_seq = order.next_seq
    return progress
