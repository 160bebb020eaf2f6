"""Background slots against a real redis-server: a key's bound (SPATE_KEY_MAX_BACKGROUND)
holds, and a slot whose response's end never reached the store is freed once older than
the horizon (SPATE_BACKGROUND_SLOT_TTL_S, at least 60 s in the settings; one second
here), so a lost end cannot hold the bound for ever."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest

from cli.redis_server import EmbeddedRedis
from store.background_slots import BackgroundSlots
from store.redis_store import RedisStore

HORIZON_S = 1


@pytest.fixture
async def slots() -> AsyncIterator[BackgroundSlots]:
    with EmbeddedRedis() as server:
        store = RedisStore(server.url)
        try:
            yield BackgroundSlots(store.client, HORIZON_S)
        finally:
            await store.close()


async def test_a_slot_past_the_horizon_is_freed(slots: BackgroundSlots) -> None:
    assert await slots.take("owner", "resp_lost", limit=1)
    # At the bound: another response of the same key waits for a slot.
    assert not await slots.take("owner", "resp_next", limit=1)
    assert await slots.take("other", "resp_other", limit=1)  # another key's bound is its own
    # resp_lost's end never comes; past the horizon its slot is dropped at the next take.
    deadline = time.monotonic() + HORIZON_S + 10
    while not await slots.take("owner", "resp_next", limit=1):
        assert time.monotonic() < deadline, "the stale slot was never freed"
        await asyncio.sleep(0.2)
    assert await slots.held("owner") == 1


async def test_a_slot_given_back_frees_the_bound_at_once(slots: BackgroundSlots) -> None:
    assert await slots.take("owner", "resp_a", limit=1)
    await slots.give_back("owner", "resp_a")
    assert await slots.take("owner", "resp_b", limit=1)
