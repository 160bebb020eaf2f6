"""A poisoned event (one the store refuses) goes to the dead letters after a bounded
number of tries and is skipped, with the rest of its response; the other responses'
projection goes on meanwhile. Real nats-server and redis-server, the real projector."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from cli.nats_server import EmbeddedNats
from cli.redis_server import EmbeddedRedis
from harness.waits import until
from journal import Journal, JournalSettings
from store.projector import DURABLE_NAME, MAX_TRIES, Projector
from store.redis_store import RedisStore
from tests.store.projection import input_items_of, new_response_id, response_log


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[EmbeddedNats, EmbeddedRedis]]:
    with EmbeddedNats() as nats, EmbeddedRedis() as redis:
        yield nats, redis


async def _stored_log(journal: Journal, events: list[object]) -> None:
    for event in events:
        await journal.write(event)


async def test_a_poisoned_response_is_dead_lettered_and_the_others_go_on(
    servers: tuple[EmbeddedNats, EmbeddedRedis],
) -> None:
    nats, redis = servers
    journal = Journal(JournalSettings(nats_url=nats.url), name="dead-letter-test")
    journal.start()
    store = RedisStore(redis.url)
    projector = Projector(journal, store)
    try:
        assert await journal.wait_connected()
        poisoned, good = new_response_id(), new_response_id()
        item = input_items_of(1)[0]
        poisoned_log = response_log(poisoned)
        # Two input items with one id: the store refuses the first event, every time.
        poisoned_log[0] = poisoned_log[0].model_copy(
            update={"store": True, "input_items": (item, item)})
        good_log = response_log(good)
        good_log[0] = good_log[0].model_copy(update={"store": True})
        await _stored_log(journal, poisoned_log)
        await _stored_log(journal, good_log)
        projector.start()

        async def good_done() -> bool:
            found = await store.get_response(good)
            return found is not None and found.status == "completed"

        async def dead_lettered() -> bool:
            return any(record["response_id"] == poisoned for record in await store.dead_letters())

        started = asyncio.get_running_loop().time()
        assert await until(good_done, 30)
        # Not held up by the poisoned response's retries (a second apart each).
        assert asyncio.get_running_loop().time() - started < MAX_TRIES
        assert await until(dead_lettered, 30)
        record = next(r for r in await store.dead_letters() if r["response_id"] == poisoned)
        assert record["seq"] == 0 and "appears twice" in record["error"]
        assert await store.get_response(poisoned) is None

        async def drained() -> bool:  # its later events were skipped, not retried
            backlog = await journal.feed_backlog(DURABLE_NAME)
            return backlog is not None and backlog.pending == 0 and backlog.ack_pending == 0

        assert await until(drained, 30)
    finally:
        await projector.stop()
        await store.close()
        await journal.close()
