"""Rate-limit states against a real nats-server: changes from two connections (two API
replicas) at once all land, none lost to a race, and a step that stores nothing writes
nothing."""

from __future__ import annotations

import asyncio

from cli.nats_server import EmbeddedNats
from tests.journal.conftest import connect


def count_up(state: bytes | None) -> tuple[bytes | None, int]:
    count = int(state or b"0") + 1
    return str(count).encode(), count


async def test_concurrent_changes_from_two_replicas_all_land(nats_server: EmbeddedNats) -> None:
    one = await connect(nats_server.url, "spate-api-one")
    two = await connect(nats_server.url, "spate-api-two")
    try:
        subject = "key.race"
        changes = [replica.rate_limits.change(subject, count_up)
                   for _ in range(40) for replica in (one, two)]
        counts = await asyncio.gather(*changes)
        assert sorted(counts) == list(range(1, 81))  # each change saw the one before it
        seen = await one.rate_limits.change(subject, lambda state: (None, state))
        assert seen == b"80"
    finally:
        await one.close()
        await two.close()


async def test_a_step_that_stores_nothing_writes_nothing(nats_server: EmbeddedNats) -> None:
    journal = await connect(nats_server.url)
    try:
        assert await journal.rate_limits.change("key.quiet", lambda state: (None, state)) is None
        assert await journal.rate_limits.change("key.quiet", count_up) == 1
    finally:
        await journal.close()
