"""The store on a Redis Cluster: three masters of real redis-server processes on loopback
ports, formed with `redis-cli --cluster create`, the store's URL `redis+cluster://`. The
whole store contract runs against it, and a response followed from the middle on one
node's notifications while its events land on whichever master holds its slot."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import subprocess
import time
from collections.abc import AsyncIterator, Iterator

import pytest
from redis.asyncio.cluster import RedisCluster

from cli.redis_server import EmbeddedRedis
from store.base import Store
from store.redis_keys import ConversationKeys, ResponseKeys
from store.redis_store import RedisStore
from tests.store.contract import StoreContract
from tests.store.contract_base import Owner, StoreFactory
from tests.store.projection import new_response_id, response_log, steps

MASTERS = 3

pytestmark = pytest.mark.skipif(shutil.which("redis-cli") is None, reason="needs redis-cli")


def form_cluster(nodes: list[EmbeddedRedis], timeout: float = 30.0) -> None:
    """Give the nodes the 16384 slots between them and wait until every node says ok."""
    addresses = [f"127.0.0.1:{node.port}" for node in nodes]
    if len(nodes) >= 3:
        command = ["redis-cli", "--cluster", "create", *addresses, "--cluster-replicas", "0",
                   "--cluster-yes"]
    else:  # `--cluster create` wants three masters; one node takes every slot itself
        command = ["redis-cli", "-p", str(nodes[0].port), "cluster", "addslotsrange", "0", "16383"]
    subprocess.run(command, check=True, capture_output=True, timeout=timeout)
    deadline = time.monotonic() + timeout
    for node in nodes:
        while b"cluster_state:ok" not in subprocess.run(
            ["redis-cli", "-p", str(node.port), "cluster", "info"],
            capture_output=True, timeout=timeout,
        ).stdout:
            if time.monotonic() > deadline:
                raise TimeoutError(f"the cluster did not form: node {node.port}")
            time.sleep(0.1)


@contextlib.contextmanager
def redis_cluster(masters: int = MASTERS) -> Iterator[list[EmbeddedRedis]]:
    nodes: list[EmbeddedRedis] = []
    try:
        for _ in range(masters):
            nodes.append(EmbeddedRedis(cluster=True).start())
        form_cluster(nodes)
        yield nodes
    finally:
        for node in nodes:
            node.stop()


def cluster_url(nodes: list[EmbeddedRedis]) -> str:
    return f"redis+cluster://127.0.0.1:{nodes[0].port}"


@pytest.fixture(scope="module")
def cluster() -> Iterator[list[EmbeddedRedis]]:
    with redis_cluster() as nodes:
        yield nodes


class TestRedisClusterStore(StoreContract):
    @pytest.fixture(autouse=True)
    def _cluster(self, cluster: list[EmbeddedRedis]) -> None:
        self.nodes = cluster

    @pytest.fixture
    def make_store(self, cluster: list[EmbeddedRedis]) -> StoreFactory:
        return lambda **options: RedisStore(cluster_url(cluster), **options)

    @pytest.fixture
    async def unavailable_store(self) -> AsyncIterator[Store]:
        with redis_cluster(masters=1) as nodes:
            store = RedisStore(cluster_url(nodes), timeout_s=1.0)
            try:
                await store.ping()  # the cluster's map and a connection, then broken
                nodes[0].stop()
                yield store
            finally:
                await store.close()

    async def remaining_ttls(self, kind: Owner, owner_id: str) -> list[float]:
        keys = ResponseKeys(owner_id).all() if kind == "response" else ConversationKeys(owner_id).all()
        client = RedisCluster.from_url(f"redis://127.0.0.1:{self.nodes[0].port}")
        try:
            ttls = [await client.pttl(key) for key in keys]
        finally:
            await client.aclose()
        # -2: no such key (an empty list or hash); -1 would be a key that never expires.
        return [ttl / 1000 for ttl in ttls if ttl != -2]

    def followed(self, store: Store) -> int:
        assert isinstance(store, RedisStore)
        return store.tails.followed


async def test_responses_spread_over_the_masters(cluster: list[EmbeddedRedis]) -> None:
    """Responses land on every master (one slot each, keys together), and a follower
    subscribed through the URL's node gets every event of one stored on another."""
    store = RedisStore(cluster_url(cluster))
    client = RedisCluster.from_url(f"redis://127.0.0.1:{cluster[0].port}")
    try:
        await client.initialize()  # the slot map
        response_ids = [new_response_id() for _ in range(24)]
        for response_id in response_ids:
            await steps(response_log(response_id))[0].append_to(store)
        holders = {client.get_node_from_key(ResponseKeys(rid).meta).port for rid in response_ids}
        assert holders == {node.port for node in cluster}
        elsewhere = next(rid for rid in response_ids
                         if client.get_node_from_key(ResponseKeys(rid).meta).port != cluster[0].port)
        log_steps = steps(response_log(elsewhere))

        async def follow() -> list[int]:
            async with contextlib.aclosing(store.follow_sse(elsewhere, after=0)) as events:
                return [event["sequence_number"] async for event in events]

        follower = asyncio.create_task(follow())
        while store.tails.followed == 0:
            await asyncio.sleep(0.01)
        for step in log_steps[1:]:
            await step.append_to(store)
        expected = list(range(1, sum(len(step.sse_events) for step in log_steps)))
        assert await asyncio.wait_for(follower, 10) == expected
    finally:
        await store.close()
        await client.aclose()
