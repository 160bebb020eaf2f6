"""The Redis backend of the store (redis.asyncio). Every write is one Lua script, so it
is atomic and costs one round trip; docs/store.md lists the keys and the scripts' rules."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import zlib
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from redis.exceptions import RedisError

from events.fold import TERMINAL_SSE_TYPES
from store.base import DEAD_LETTERS_KEPT, DEFAULT_TTL_S, Store
from store.errors import SeqGap, StoreError
from store.items import dump, item_args, with_ids
from store.records import ItemPage, JSONObject, PageOrder, StoredResponse
from store.redis_client import RedisClient, connect
from store.redis_conversations import RedisConversations
from store.redis_keys import DEAD_LETTERS_KEY, ResponseKeys, item_key
from store.redis_notifications import Tails
from store.redis_scripts import RedisScripts, read_page, translated_errors

log = logging.getLogger("spate.store")

# Connections one store object opens at most (SPATE_STORE_POOL_SIZE); a call past them
# waits for one to come free.
DEFAULT_POOL_SIZE = 64
# How long a call waits for a pooled connection when they are all busy (a burst).
DEFAULT_POOL_WAIT_S = 10.0
# Append's script replies (store/lua/append.lua).
_APPLIED, _DUPLICATE, _GAP, _DELETED = 1, 0, -1, -2
# Deflate level for a sealed response, paid once: 9 packs a 128-token response a few per
# cent smaller than 6, in well under a millisecond.
_PACK_LEVEL = 9


class RedisStore(RedisConversations, Store):
    """The store on one Redis server or a Redis Cluster, as the URL says
    (store/redis_client.py). Connects lazily: the first call (`ping`, say) opens the
    pool."""

    def __init__(
        self, url: str, ttl_s: int = DEFAULT_TTL_S, *, timeout_s: float = 2.0,
        pool_size: int = DEFAULT_POOL_SIZE, pool_wait_s: float = DEFAULT_POOL_WAIT_S,
    ) -> None:
        if ttl_s < 1:
            raise ValueError(f"ttl_s must be at least 1 second, not {ttl_s}")
        self.ttl_s = ttl_s
        connection = connect(url, timeout_s=timeout_s, pool_size=pool_size, pool_wait_s=pool_wait_s)
        self._redis: RedisClient = connection.client
        self._subscriber = connection.subscriber
        self._scripts = RedisScripts.register(self._redis)
        # Followers of a response share one subscription and one read of its appends.
        self.tails = Tails(self._subscriber, self.sse_events)

    @property
    def client(self) -> RedisClient:
        """The shared client, for other Redis users of this process (background slots)."""
        return self._redis

    async def close(self) -> None:
        await self.tails.close()
        with contextlib.suppress(RedisError, OSError):
            await self._redis.aclose()
            if self._subscriber is not self._redis:
                await self._subscriber.aclose()

    async def ping(self) -> None:
        with translated_errors():
            await self._redis.ping()

    # -- projected responses ------------------------------------------------------------

    async def append(
        self,
        response_id: str,
        seq: int,
        *,
        sse_events: Sequence[Mapping[str, Any]],
        status: str,
        response: Mapping[str, Any] | None = None,
        owner: str | None = None,
        input_items: Sequence[Mapping[str, Any]] = (),
        events: int = 1,
    ) -> bool:
        if seq < 0:
            raise ValueError(f"seq is never negative, got {seq}")
        if events < 1:
            raise ValueError(f"an append covers at least one event, not {events}")
        if not status:
            raise ValueError("status is required")
        if seq == 0 and response is None:
            raise ValueError("the first event of a response stores its Response snapshot")
        first_number = _first_sequence_number(sse_events)
        keys = ResponseKeys(response_id)
        args: list[Any] = [
            seq, events, self.ttl_s, status,
            "" if response is None else dump(response),
            owner or "", keys.notify, first_number, len(sse_events),
            *(dump(event) for event in sse_events),
            *item_args(with_ids(input_items)),
        ]
        with translated_errors():
            code, value = await self._scripts.append(keys=keys.all(), args=args)
        if code == _APPLIED:
            if any(event["type"] in TERMINAL_SSE_TYPES for event in sse_events):
                await self._seal(keys)
            return True
        if code in (_DUPLICATE, _DELETED):
            return False
        if code == _GAP:
            raise SeqGap(response_id, value, seq)
        # A fold that numbered its SSE events differently from the stored ones: a bug.
        raise StoreError(
            f"response {response_id!r}: SSE events numbered from {first_number} do not "
            f"follow the {value} stored"
        )

    async def _seal(self, keys: ResponseKeys) -> None:
        """Pack an ended response's snapshot and SSE events into one deflated value:
        what a GET and a resumed stream read, at a fraction of the snapshot and one list
        entry per event. Left as it is (still read the same) when the list or the
        snapshot changed meanwhile."""
        try:
            with translated_errors():
                async with self._redis.pipeline(transaction=False) as pipe:
                    pipe.lrange(keys.sse, 0, -1)
                    pipe.hget(keys.meta, "response")
                    values, response = await pipe.execute()
                if response is None:
                    return
                lines = [_bytes(response), *(_bytes(value) for value in values)]
                packed = zlib.compress(b"\n".join(lines), _PACK_LEVEL)
                await self._scripts.seal(
                    keys=keys.all(), args=[packed, len(values), self.ttl_s, response])
        except StoreError as error:  # the events are stored: unsealed, they only cost more
            log.warning("could not seal %s: %s", keys.response_id, error)

    async def get_response(self, response_id: str) -> StoredResponse | None:
        fields = ["response", "status", "owner", "next_seq", "cancelled", "sealed"]
        with translated_errors():
            values = await self._redis.hmget(ResponseKeys(response_id).meta, fields)
        response, status, owner, next_seq, cancelled, sealed = values
        if response is None and sealed is not None:
            response = _unseal(_bytes(sealed))[0]
        if response is None or status is None or next_seq is None:
            return None
        return StoredResponse(
            response=json.loads(response),
            status=_text(status),
            owner=_text(owner) if owner is not None else None,
            next_seq=int(next_seq),
            cancelled=cancelled is not None,
        )

    async def next_seq(self, response_id: str) -> int:
        with translated_errors():
            value = await self._redis.hget(ResponseKeys(response_id).meta, "next_seq")
        return int(value) if value is not None else 0

    async def sse_events(self, response_id: str, after: int = -1) -> list[JSONObject]:
        keys = ResponseKeys(response_id)
        start = max(after + 1, 0)  # list index = sequence_number
        with translated_errors():
            reply = await self._scripts.read_sse(keys=[keys.meta, keys.sse], args=[start])
        if reply[0] == 1:
            return [json.loads(line) for line in _unseal(reply[1])[1 + start:]]
        return [json.loads(value) for value in reply[1:]]

    async def follow_sse(
        self, response_id: str, after: int = -1, *, idle_timeout_s: float | None = None
    ) -> AsyncIterator[JSONObject]:
        # Every follower of the response in this process reads one shared tail
        # (store/redis_notifications.py): one subscription and one read per append.
        loop = asyncio.get_running_loop()
        async with self.tails.follow(response_id) as tail:
            quiet_since = loop.time()
            position = max(after + 1, 0)  # list index = sequence_number
            while True:
                changed = tail.changed
                if position < len(tail.events):
                    for event in tail.events[position:]:
                        position = event["sequence_number"] + 1
                        yield event
                        if event["type"] in TERMINAL_SSE_TYPES:
                            return
                    quiet_since = loop.time()
                    continue
                if tail.error is not None:
                    raise tail.error
                if tail.ended:
                    return
                wait = None
                if idle_timeout_s is not None:
                    wait = quiet_since + idle_timeout_s - loop.time()
                    if wait <= 0:
                        raise TimeoutError(
                            f"no new events of response {response_id!r} for {idle_timeout_s}s"
                        )
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(changed.wait(), wait)

    async def input_items(
        self,
        response_id: str,
        *,
        after: str | None = None,
        before: str | None = None,
        limit: int = 20,
        order: PageOrder = "desc",
    ) -> ItemPage | None:
        keys = ResponseKeys(response_id)
        return await read_page(
            self._scripts.page, [keys.meta, keys.input_order, keys.input_items], "next_seq",
            after, before, limit, order,
        )

    async def delete_response(self, response_id: str) -> bool:
        with translated_errors():
            existed = await self._scripts.delete_response(
                keys=ResponseKeys(response_id).all(), args=[self.ttl_s]
            )
        return bool(existed)

    async def dead_letter(self, response_id: str, seq: int, error: str) -> None:
        record = {"response_id": response_id, "seq": seq, "error": error, "at": time.time()}
        with translated_errors():
            async with self._redis.pipeline(transaction=True) as pipe:
                pipe.lpush(DEAD_LETTERS_KEY, json.dumps(record, separators=(",", ":")))
                pipe.ltrim(DEAD_LETTERS_KEY, 0, DEAD_LETTERS_KEPT - 1)
                await pipe.execute()

    async def dead_letters(self) -> list[JSONObject]:
        with translated_errors():
            values = await self._redis.lrange(DEAD_LETTERS_KEY, 0, -1)
        return [json.loads(value) for value in values]

    async def mark_cancelled(self, response_id: str) -> bool:
        with translated_errors():
            marked = await self._scripts.mark_cancelled(
                keys=ResponseKeys(response_id).all(), args=[self.ttl_s]
            )
        return bool(marked)

    async def put_items(self, items: Sequence[Mapping[str, Any]], owner: str | None) -> None:
        with translated_errors():
            async with self._redis.pipeline(transaction=False) as pipe:
                for item in items:
                    value = json.dumps(item, separators=(",", ":"))
                    pipe.set(item_key(owner, str(item["id"])), value, ex=self.ttl_s)
                await pipe.execute()

    async def get_item(self, item_id: str, owner: str | None) -> JSONObject | None:
        with translated_errors():
            value = await self._redis.get(item_key(owner, item_id))
        if value is None:
            return None
        item: JSONObject = json.loads(value)
        return item

    async def is_cancelled(self, response_id: str) -> bool:
        with translated_errors():
            return bool(await self._redis.hexists(ResponseKeys(response_id).meta, "cancelled"))


def _first_sequence_number(sse_events: Sequence[Mapping[str, Any]]) -> int:
    """The first event's number, after checking the numbers rise by exactly 1."""
    numbers = [event["sequence_number"] for event in sse_events]
    if numbers and numbers != list(range(numbers[0], numbers[0] + len(numbers))):
        raise ValueError(f"SSE sequence numbers must rise by 1, got {numbers}")
    return numbers[0] if numbers else 0


def _unseal(sealed: bytes) -> list[bytes]:
    """A sealed value's lines: the Response JSON, then every SSE event's JSON."""
    return zlib.decompress(sealed).split(b"\n")


def _bytes(value: bytes | str) -> bytes:
    return value if isinstance(value, bytes) else value.encode()


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
