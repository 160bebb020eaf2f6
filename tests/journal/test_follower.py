"""Following a response's log, against a real nats-server: events come out in seq order,
once each, even when the live subscription missed some."""

from __future__ import annotations

import json
import urllib.request

import pytest

from cli.nats_server import EmbeddedNats, free_port
from events import ChatMessage, GenerationStarted, RequestAccepted
from journal import Journal
from journal.follower import BUFFERED_EVENTS, MAX_QUIET_CHECK_S
from tests.journal.conftest import connect

RID = "resp_eventlog"


def event(seq: int, response_id: str = RID) -> object:
    if seq == 0:
        return RequestAccepted(response_id=response_id, seq=0, model="m",
                               messages=(ChatMessage(role="user", content="hi"),))
    return GenerationStarted(response_id=response_id, seq=seq, worker_id="w", input_tokens=seq)


async def publish(journal: Journal, seq: int) -> None:
    """One event written out of order on purpose: a writer at that seq."""
    writer = journal.writer(RID, seq, await journal.take_lease(RID))
    stored = event(seq)
    fields = stored.model_dump(exclude={"response_id", "seq", "type", "v"})
    await writer.publish(type(stored), **fields)
    await writer.flush()


@pytest.mark.asyncio
async def test_missed_and_reordered_events_come_out_in_order(journal: Journal) -> None:
    for seq in (0, 1, 2):  # stored before the live subscription exists: missed by it
        await publish(journal, seq)
    log = await journal.follow(RID)
    seen = [(await log.next(timeout=2)).seq for _ in range(3)]
    assert seen == [0, 1, 2]
    await publish(journal, 4)  # arrives early; 3 comes after
    await publish(journal, 3)
    seen += [(await log.next(timeout=2)).seq for _ in range(2)]
    assert seen == [0, 1, 2, 3, 4]
    await publish(journal, 3)  # a retried publish the stream drops as a duplicate
    assert await log.next(timeout=0.5) is None
    await log.close()


async def test_a_reader_that_falls_behind_loses_nothing(journal: Journal) -> None:
    """More events than the follower buffers arrive while nobody reads: the overflow is
    dropped from memory and read back from the log, in order, once each."""
    rid = "resp_slow_reader"
    log = await journal.follow(rid)
    total = BUFFERED_EVENTS + 500
    writer = journal.writer(rid, 0, await journal.take_lease(rid))
    first = event(0, rid)
    await writer.publish(RequestAccepted, **first.model_dump(exclude={"response_id", "seq", "type", "v"}))
    for seq in range(1, total):
        await writer.publish(GenerationStarted, worker_id="w", input_tokens=seq)
    await writer.flush()
    seen = [(await log.next(timeout=5)).seq for _ in range(total)]
    assert seen == list(range(total))
    assert await log.next(timeout=0.3) is None
    await log.close()


async def test_a_quiet_stream_checks_the_log_less_and_less_often() -> None:
    """A stream queued behind a busy worker stays quiet: it looks at the log for a missed
    tail after the first quiet wait, then at doubling intervals, not after every wait
    (counted as the messages the journal's connection sends, from the server's monitoring
    port)."""
    monitor = free_port()

    def api_calls() -> int:
        with urllib.request.urlopen(f"http://127.0.0.1:{monitor}/connz", timeout=5) as reply:
            return sum(int(conn["in_msgs"]) for conn in json.load(reply)["connections"]
                       if conn.get("name") == "spate-quiet")

    with EmbeddedNats(extra_args=("-m", str(monitor))) as server:
        journal = await connect(server.url, name="spate-quiet")
        try:
            await journal.publish_request(event(0, "resp_quiet"))
            log = await journal.follow("resp_quiet")
            assert (await log.next(timeout=5)).seq == 0
            before = api_calls()
            waits = 0
            while waits * 0.2 < 2 * MAX_QUIET_CHECK_S:  # 8 s of quiet, in 0.2 s waits
                assert await log.next(timeout=0.2) is None
                waits += 1
            # A check after every wait would be 40 reads; doubling from 0.2 s to 4 s
            # makes 6 or 7 (0.2, 0.4, 0.8, 1.6, 3.2, 4, ...).
            assert api_calls() - before <= 10, api_calls() - before
            await log.close()
        finally:
            await journal.close()
