"""The store contract against a real redis-server (started on a free port for the
session), plus what only the Redis backend promises: one round trip per event and
recovery when Redis comes back."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Iterator

import pytest
import redis.asyncio

from cli.redis_server import EmbeddedRedis
from store.base import Store
from store.errors import StoreUnavailable
from store.redis_keys import ConversationKeys, ResponseKeys
from store.redis_store import RedisStore
from tests.store.contract import StoreContract
from tests.store.contract_base import Owner, StoreFactory
from tests.store.projection import new_response_id, project, response_log, steps


@pytest.fixture(scope="module")
def redis_server() -> Iterator[EmbeddedRedis]:
    with EmbeddedRedis() as server:
        yield server


class TestRedisStore(StoreContract):
    @pytest.fixture(autouse=True)
    def _server(self, redis_server: EmbeddedRedis) -> None:
        self.server = redis_server

    @pytest.fixture
    def make_store(self, redis_server: EmbeddedRedis) -> StoreFactory:
        return lambda **options: RedisStore(redis_server.url, **options)

    @pytest.fixture
    async def unavailable_store(self) -> AsyncIterator[Store]:
        server = EmbeddedRedis().start()
        store = RedisStore(server.url, timeout_s=1.0)
        try:
            await store.ping()  # a pooled connection that the stop then breaks
            server.stop()
            yield store
        finally:
            await store.close()
            server.stop()

    async def remaining_ttls(self, kind: Owner, owner_id: str) -> list[float]:
        keys = ResponseKeys(owner_id).all() if kind == "response" else ConversationKeys(owner_id).all()
        client = redis.asyncio.Redis.from_url(self.server.url)
        try:
            ttls = [await client.pttl(key) for key in keys]
        finally:
            await client.aclose()
        # -2: no such key (an empty list or hash); -1 would be a key that never expires.
        return [ttl / 1000 for ttl in ttls if ttl != -2]

    def followed(self, store: Store) -> int:
        assert isinstance(store, RedisStore)
        return store.tails.followed


async def test_an_append_is_one_round_trip(redis_server: EmbeddedRedis) -> None:
    store = RedisStore(redis_server.url)
    client = redis.asyncio.Redis.from_url(redis_server.url)
    try:
        response_id = new_response_id()
        log_steps = steps(response_log(response_id))
        await log_steps[0].append_to(store)  # loads the script once
        await client.config_resetstat()
        for step in log_steps[1:]:
            await step.append_to(store)
        stats = await client.info("commandstats")
        calls = {name: entry["calls"] for name, entry in stats.items()}
        # Redis counts the commands a script runs too; what the client sent is one
        # EVALSHA per event, and no script load or other top-level read but the seal's
        # (one read of the SSE events and one EVALSHA, after the terminal event).
        assert calls["cmdstat_evalsha"] == len(log_steps) - 1 + 1
        assert calls["cmdstat_lrange"] == 1
        assert not {"cmdstat_script", "cmdstat_eval", "cmdstat_hmget"} & set(calls)
    finally:
        await store.close()
        await client.aclose()


async def test_an_ended_response_costs_at_most_three_times_its_json(
    redis_server: EmbeddedRedis,
) -> None:
    """128 tokens streamed: once sealed, every key of the response together takes at
    most 3x its final Response JSON in Redis memory."""
    store = RedisStore(redis_server.url)
    client = redis.asyncio.Redis.from_url(redis_server.url)
    try:
        response_id = new_response_id()
        state = await project(store, response_log(response_id, answer=tuple(
            f" word{index % 17}" for index in range(128))))
        final = len(json.dumps(state.response(), separators=(",", ":")))
        used = [await client.memory_usage(key) for key in ResponseKeys(response_id).all()]
        assert 0 < sum(size or 0 for size in used) <= 3 * final
        assert await store.sse_events(response_id) == state.sse_events
    finally:
        await store.close()
        await client.aclose()


async def test_the_store_recovers_when_redis_comes_back(tmp_path: object) -> None:
    server = EmbeddedRedis(store_dir=str(tmp_path)).start()
    store = RedisStore(server.url, timeout_s=1.0)
    try:
        response_id = new_response_id()
        state = await project(store, response_log(response_id))
        server.stop()
        with pytest.raises(StoreUnavailable):
            await store.get_response(response_id)
        # Same port, same data folder: the append-only file brings everything back.
        server = EmbeddedRedis(port=server.port, store_dir=str(tmp_path)).start()
        stored = await store.get_response(response_id)
        assert stored is not None and stored.response == state.response()
    finally:
        await store.close()
        server.stop()


async def test_followers_of_one_response_share_one_subscription(redis_server: EmbeddedRedis) -> None:
    """300 followers through a pool of 4 connections: one tail (one channel subscribed on
    the one pub/sub connection, one read an append), every follower gets every event, and
    the tail goes with the last follower."""
    observer = redis.asyncio.Redis.from_url(redis_server.url)
    before = len(await observer.client_list())  # other tests' connections, and this one
    store = RedisStore(redis_server.url, pool_size=4)
    response_id = new_response_id()
    log_steps = steps(response_log(response_id))
    try:
        await log_steps[0].append_to(store)

        async def follow() -> list[int]:
            numbers = []
            async with contextlib.aclosing(store.follow_sse(response_id)) as events:
                async for event in events:
                    numbers.append(event["sequence_number"])
            return numbers

        followers = [asyncio.create_task(follow()) for _ in range(300)]
        while store.tails.followed == 0:
            await asyncio.sleep(0.01)
        assert store.tails.followed == 1
        for step in log_steps[1:]:
            await step.append_to(store)
        expected = list(range(sum(len(step.sse_events) for step in log_steps)))
        assert all(numbers == expected for numbers in await asyncio.gather(*followers))
        assert store.tails.followed == 0
        opened = len(await observer.client_list()) - before
        assert opened <= 4 + 1  # the pool and the pub/sub connection
    finally:
        await store.close()
        await observer.aclose()
