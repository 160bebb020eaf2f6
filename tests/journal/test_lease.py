"""Fencing: once another writer takes a response's lease, JetStream refuses the old
writer's events, and the old writer learns it at once."""

from __future__ import annotations

import asyncio

import pytest

from cli.nats_server import EmbeddedNats
from events import GenerationFailed, GenerationStarted, TokensGenerated
from events.subjects import EVENTS_STREAM
from harness.waits import until
from journal import Fenced, Journal
from tests.journal.conftest import connect
from tests.journal.test_log_reader import request


async def test_a_superseded_writer_is_refused_and_told(journal: Journal) -> None:
    rid = "resp_fenced"
    await journal.publish_request(request(rid))
    fenced: list[str] = []
    stale = journal.writer(rid, 1, await journal.take_lease(rid), on_fenced=lambda: fenced.append(rid))
    await stale.publish(GenerationStarted, worker_id="stale", input_tokens=1)
    await stale.publish(TokensGenerated, token_ids=(1,), text="a", channel="text")
    await stale.flush()
    # Another worker takes over after the stale one wrote seq 1 and 2.
    current = journal.writer(rid, 3, await journal.take_lease(rid))
    await current.publish(GenerationStarted, worker_id="current", input_tokens=1)
    # The stale one goes on as if nothing happened: its pipelined event is refused, and
    # it is told as soon as the refusal comes back, before any flush.
    await stale.publish(TokensGenerated, token_ids=(9,), text="x", channel="text")
    for _ in range(100):
        if stale.fenced:
            break
        await asyncio.sleep(0.02)
    assert fenced == [rid] and stale.fenced
    with pytest.raises(Fenced):
        await stale.publish(TokensGenerated, token_ids=(9,), text="x", channel="text")
    with pytest.raises(Fenced):
        await stale.flush()
    await current.publish(TokensGenerated, token_ids=(2,), text="b", channel="text")
    await current.flush()
    log = await journal.read_log(rid)
    assert [event.seq for event in log] == [0, 1, 2, 3, 4]
    assert [getattr(event, "worker_id", None) for event in log[1:4:2]] == ["stale", "current"]
    assert [event.text for event in log if isinstance(event, TokensGenerated)] == ["a", "b"]


async def test_a_take_over_write_fences_the_worker(journal: Journal) -> None:
    rid = "resp_taken_over"
    await journal.publish_request(request(rid))
    stale = journal.writer(rid, 1, await journal.take_lease(rid))
    await journal.write(GenerationFailed(response_id=rid, seq=1, code="worker_lost", message="gone"),
                        take_over=True)
    await stale.publish(GenerationStarted, worker_id="stale", input_tokens=1)
    with pytest.raises(Fenced):
        await stale.flush()
    assert [type(event) for event in await journal.read_log(rid)][1:] == [GenerationFailed]


async def streams_declared(journal: Journal) -> bool:
    """Whether the journal is back on NATS and has declared its streams there again."""
    try:
        await journal.connection.require().stream_info(EVENTS_STREAM)
    except Exception:
        return False
    return True


async def test_a_lease_lost_with_the_servers_data_is_taken_again() -> None:
    server = EmbeddedNats().start()
    try:
        journal = await connect(server.url, nats_outage_s=30)
        rid = "resp_lease_lost"
        writer = journal.writer(rid, 1, await journal.take_lease(rid))
        server.stop()  # its data folder goes with it: it comes back empty
        server = EmbeddedNats(port=server.port).start()
        assert await until(lambda: streams_declared(journal), timeout=30)
        await writer.publish(GenerationStarted, worker_id="w", input_tokens=1)
        await writer.flush()
        assert not writer.fenced
        assert await journal.last_seq(rid) == 1
        await journal.close()
    finally:
        server.stop()
