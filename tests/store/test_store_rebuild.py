"""`spate store rebuild`, between a real nats-server and a real redis-server: a Redis that
lost everything gets back every response the log still holds, exactly as the projection
had stored it, beside a projector that keeps running; what the log no longer holds (a
response whose beginning aged out) and `store: false` responses stay out."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from typing import Any

import pytest

from cli.nats_server import EmbeddedNats
from cli.redis_server import EmbeddedRedis
from events import GenerationFinished, TokensGenerated, fold
from events.subjects import EVENTS_STREAM, events_subject
from harness.waits import until
from journal import Journal
from store.projector import Projector
from store.redis_store import RedisStore
from tests.journal.conftest import connect
from tests.processes import SpateProcess, wait_for
from tests.store.projection import input_items_of, new_response_id, response_log

COMPLETE = 6


@pytest.fixture
def servers() -> Iterator[tuple[EmbeddedNats, EmbeddedRedis]]:
    """A log and a store of this test's own: the rebuild reads the whole log."""
    with EmbeddedNats() as nats_server, EmbeddedRedis() as redis_server:
        yield nats_server, redis_server


async def write(journal: Journal, events: list[Any]) -> None:
    """Write a log as the API (seq 0) and a worker (the rest, under its lease) do."""
    response_id = events[0].response_id
    await journal.publish_request(events[0])
    writer = journal.writer(response_id, events[0].seq + 1, await journal.take_lease(response_id))
    for event in events[1:]:
        await writer.publish(type(event), **event.model_dump(exclude={"response_id", "seq", "type", "v"}))
    await writer.flush()


def stored_log(response_id: str, store: bool = True, answer: int = 3) -> list[Any]:
    events = response_log(response_id, tuple(f"w{index} " for index in range(answer)))
    request = events[0].model_copy(update={"store": store, "input_items": tuple(input_items_of(2))})
    return [request, *events[1:]]


async def snapshot(store: RedisStore, response_id: str) -> tuple[Any, ...] | None:
    stored = await store.get_response(response_id)
    if stored is None:
        return None
    items = await store.input_items(response_id, limit=100, order="asc")
    return (stored, await store.sse_events(response_id),
            items.list_object() if items is not None else None)


async def test_a_lost_store_is_rebuilt_from_the_log(
    servers: tuple[EmbeddedNats, EmbeddedRedis],
) -> None:
    nats_server, redis_server = servers
    journal = await connect(nats_server.url, name="spate-rebuild-test")
    store = RedisStore(redis_server.url)
    projector = Projector(journal, store)
    try:
        complete = [new_response_id() for _ in range(COMPLETE)]
        running, unstored, aged = new_response_id(), new_response_id(), new_response_id()
        for response_id in [*complete, aged]:
            await write(journal, stored_log(response_id))
        running_log = stored_log(running, answer=6)
        await write(journal, running_log[:-3])  # still generating
        await write(journal, stored_log(unstored, store=False))

        projector.start()  # the projection as it runs in every API replica
        expected_next = {**{rid: len(stored_log(rid)) for rid in [*complete, aged]},
                         running: len(running_log) - 3}

        async def projected() -> bool:
            return all([await store.next_seq(rid) == n for rid, n in expected_next.items()])

        assert await until(projected, 30)
        before = {rid: await snapshot(store, rid) for rid in [*complete, running]}
        assert await snapshot(store, unstored) is None

        # The oldest response's beginning ages out of the log; then Redis loses everything.
        js = journal.connection.require()
        first = await js.get_msg(EVENTS_STREAM, seq=1, subject=events_subject(aged), next=True)
        await js.delete_msg(EVENTS_STREAM, first.seq)
        await store.client.flushall()
        assert all([await snapshot(store, rid) is None for rid in before])

        rebuild = SpateProcess(["store", "--store-url", redis_server.url, "rebuild"],
                               {"SPATE_NATS_URL": nats_server.url}, "store-rebuild")
        assert await asyncio.to_thread(wait_for, lambda: not rebuild.alive(), 120)
        output = rebuild.output()
        rebuild.stop()
        assert rebuild.process.returncode == 0, output[-3000:]
        print(output.strip().splitlines()[-1])
        counts = re.search(r"rebuilt (\d+) responses from (\d+) events .*; left out: "
                           r"(\d+) store=false, (\d+) aged out", output)
        assert counts is not None, output[-3000:]
        assert [int(n) for n in counts.groups()] == [
            COMPLETE + 1, sum(expected_next.values()) + len(stored_log(unstored)) - 1, 1, 1]

        for response_id, stored in before.items():
            assert await snapshot(store, response_id) == stored, response_id
        assert await snapshot(store, unstored) is None
        assert await snapshot(store, aged) is None

        # The running response goes on: the live projector carries on from the rebuilt
        # prefix, and the stored response is the fold of the whole log.
        rest = running_log[-3:]
        writer = journal.writer(running, rest[0].seq, await journal.take_lease(running))
        for event in rest:
            await writer.publish(type(event), **event.model_dump(exclude={"response_id", "seq", "type", "v"}))
        await writer.flush()
        assert isinstance(rest[-1], GenerationFinished) and isinstance(rest[0], TokensGenerated)

        async def finished() -> bool:
            found = await store.get_response(running)
            return found is not None and found.status == "completed"

        assert await until(finished, 30)
        whole = await journal.read_log(running)
        assert (await store.get_response(running)).response == fold(whole).response()  # type: ignore[union-attr]
        assert await store.dead_letters() == []
    finally:
        await projector.stop()
        await store.close()
        await journal.close()

