"""Writing a response's log and reading it back, against a real nats-server."""

from __future__ import annotations

import asyncio

from events import (
    ChatMessage,
    GenerationFinished,
    GenerationStarted,
    RequestAccepted,
    TokensGenerated,
    Usage,
)
from journal import Journal


def request(response_id: str, model: str = "journal-model") -> RequestAccepted:
    return RequestAccepted(response_id=response_id, seq=0, model=model,
                           messages=(ChatMessage(role="user", content="hi"),))


async def test_a_log_reads_back_in_order_once_each(journal: Journal) -> None:
    rid = "resp_readback"
    assert await journal.read_log(rid) == []
    assert not await journal.response_exists(rid)
    await journal.publish_request(request(rid))
    await journal.publish_request(request(rid))  # a retried publish: dropped by its id
    writer = journal.writer(rid, 1, await journal.take_lease(rid))
    await writer.publish(GenerationStarted, worker_id="w", input_tokens=3)
    for token in range(5):
        await writer.publish(TokensGenerated, token_ids=(token,), text=str(token), channel="text")
    await writer.publish(GenerationFinished, finish_reason="stop",
                         usage=Usage(input_tokens=3, output_tokens=5))
    await writer.flush()
    log = await journal.read_log(rid)
    assert [event.seq for event in log] == list(range(8))
    assert isinstance(log[0], RequestAccepted) and isinstance(log[-1], GenerationFinished)
    assert await journal.last_seq(rid) == 7
    assert await journal.response_exists(rid)


async def test_a_gap_leaves_a_prefix(journal: Journal) -> None:
    rid = "resp_gap"
    await journal.publish_request(request(rid))
    late = journal.writer(rid, 2, await journal.take_lease(rid))  # seq 1 is never written
    await late.publish(GenerationStarted, worker_id="w", input_tokens=1)
    await late.flush()
    assert [event.seq for event in await journal.read_log(rid)] == [0]


async def test_cancels_are_seen_live_and_read_back(journal: Journal) -> None:
    seen: list[str] = []
    subscription = await journal.subscribe_cancels(seen.append)
    try:
        assert not await journal.cancel_requested("resp_cancelled")
        await journal.cancel("resp_cancelled", "requested")
        for _ in range(50):
            if seen:
                break
            await asyncio.sleep(0.02)
        assert seen == ["resp_cancelled"]
        assert await journal.cancel_requested("resp_cancelled")
    finally:
        await subscription.close()
