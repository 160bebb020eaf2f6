"""A response's log taken over while its first writer still writes: the stale writer's
events are sent and refused by the stream (fenced), the new holder's are stored. A plain
subscriber of the log's subject witnesses that the refused events did cross the bus, so
a test that reads them nowhere else shows that readers see only what was stored."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

from events import GenerationFinished, GenerationStarted, TokensGenerated, Usage, decode
from events.subjects import events_subject
from harness.waits import until
from journal import Fenced, Journal

STALE_TEXT = "STALE "
STALE_EVENTS = 8
# What the stored log's text is: one token from the first writer, three from the second.
STORED_TEXT = "old " + "new " * 3


@dataclass
class TakeOver:
    # Events the fenced writer sent (every one refused by the stream).
    stale_sent: int
    # Of them, those a plain subscriber of `spate.events.<id>` received.
    stale_witnessed: int


async def take_over_under_a_stale_writer(
    old: Journal, new: Journal, witness: Journal, response_id: str
) -> TakeOver:
    """Write `response_id`'s log after its seq 0 (already stored): `old` writes a start
    and a token, `new` takes the lease, `old` goes on writing STALE_TEXT (refused), then
    `new` writes its start, three tokens and the end for the same seqs."""
    stale_seen: list[bytes] = []

    async def on_message(msg: Any) -> None:
        if decode(msg.data).model_dump().get("text") == STALE_TEXT:
            stale_seen.append(msg.data)

    nc = witness.connection.nc
    subscription = await nc.subscribe(events_subject(response_id), cb=on_message)
    await nc.flush()
    try:
        stale = old.writer(response_id, await old.last_seq(response_id) + 1,
                           await old.take_lease(response_id))
        await stale.publish(GenerationStarted, worker_id="old", input_tokens=1)
        await stale.publish(TokensGenerated, channel="text", text="old ", token_ids=(1,))
        await stale.flush()

        lease = await new.take_lease(response_id)  # from here on `old` is fenced out
        next_seq = await new.last_seq(response_id) + 1
        first_stale = stale.next_seq
        with contextlib.suppress(Fenced):
            for _ in range(STALE_EVENTS):
                await stale.publish(TokensGenerated, channel="text", text=STALE_TEXT,
                                    token_ids=(2,))
            await stale.flush()
        if not stale.fenced:
            raise AssertionError("the stale writer was not fenced out")
        sent = stale.next_seq - first_stale
        # Every refused event has crossed the bus before the new holder writes its own.
        await until(lambda: len(stale_seen) >= sent, 20)

        fresh = new.writer(response_id, next_seq, lease)
        await fresh.publish(GenerationStarted, worker_id="new", input_tokens=1,
                            resumed_output_tokens=1)
        for _ in range(3):
            await fresh.publish(TokensGenerated, channel="text", text="new ", token_ids=(3,))
        await fresh.publish(GenerationFinished, finish_reason="stop",
                            usage=Usage(input_tokens=1, output_tokens=4))
        await fresh.flush()
        return TakeOver(sent, len(stale_seen))
    finally:
        await subscription.unsubscribe()
