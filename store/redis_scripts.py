"""The Lua scripts (store/lua/) registered on a client, and Redis errors turned into ours.

A registered script runs as EVALSHA: one round trip once Redis has cached it (the first
call after a Redis restart loads it and runs again).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, fields
from pathlib import Path

from redis.commands.core import AsyncScript
from redis.exceptions import (
    ClusterDownError,
    MasterDownError,
    RedisClusterException,
    RedisError,
    SlotNotCoveredError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from store.errors import StoreError, StoreUnavailable
from store.items import check_page
from store.records import ItemPage
from store.redis_client import RedisClient

_LUA = Path(__file__).with_name("lua")
# A Cluster that cannot serve a slot now (a node down, slots moving, none reachable).
_CLUSTER_AWAY = (ClusterDownError, MasterDownError, TryAgainError, SlotNotCoveredError,
                 RedisClusterException)


def _source(name: str) -> str:
    return (_LUA / "common.lua").read_text() + "\n" + (_LUA / f"{name}.lua").read_text()


@dataclass(frozen=True, slots=True)
class RedisScripts:
    append: AsyncScript
    seal: AsyncScript
    read_sse: AsyncScript
    delete_response: AsyncScript
    mark_cancelled: AsyncScript
    page: AsyncScript
    create_conversation: AsyncScript
    conversation_write: AsyncScript

    @classmethod
    def register(cls, client: RedisClient) -> RedisScripts:
        names = [field.name for field in fields(cls)]
        return cls(**{name: client.register_script(_source(name)) for name in names})


@contextmanager
def translated_errors() -> Iterator[None]:
    """Raise `StoreUnavailable` for an unreachable Redis and `StoreError` for any other
    Redis failure, so no redis-py exception reaches a caller."""
    try:
        yield
    except (RedisConnectionError, RedisTimeoutError, OSError, *_CLUSTER_AWAY) as error:
        # BusyLoadingError (Redis still reading its data at start) is a ConnectionError.
        raise StoreUnavailable(f"the Redis store is unavailable: {error}") from error
    except RedisError as error:
        raise StoreError(f"the Redis store failed: {error}") from error


async def read_page(
    page: AsyncScript,
    keys: list[str],
    exists_field: str,
    after: str | None,
    before: str | None,
    limit: int,
    order: str,
) -> ItemPage | None:
    """Run page.lua over an item list (keys: meta, order, items) whose owner exists when
    its meta hash has `exists_field`."""
    check_page(limit, order)
    with translated_errors():
        reply = await page(keys=keys, args=[exists_field, after or "", before or "", limit, order])
    if reply[0] == 0:
        return None
    if reply[0] < 0:
        raise KeyError(f"no item {after if reply[0] == -1 else before!r} in the list")
    return ItemPage([json.loads(value) for value in reply[2:]], has_more=bool(reply[1]))
