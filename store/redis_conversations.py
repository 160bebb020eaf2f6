"""Conversations on Redis: the conversation object's fields in a hash, its items in an
item list (sorted set of ids by position, hash of item JSON), each write one Lua script."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from typing import Any

from store.items import conversation_object, dump, item_args, new_conversation_id, with_ids
from store.records import ItemPage, JSONObject, PageOrder, StoredConversation
from store.redis_client import RedisClient
from store.redis_keys import ConversationKeys
from store.redis_scripts import RedisScripts, read_page, translated_errors


class RedisConversations:
    """The conversation half of `RedisStore`, which sets these three attributes."""

    ttl_s: int
    _redis: RedisClient
    _scripts: RedisScripts

    async def create_conversation(
        self,
        *,
        metadata: Mapping[str, str] | None = None,
        items: Sequence[Mapping[str, Any]] = (),
        owner: str | None = None,
        conversation_id: str | None = None,
        created_at: int | None = None,
    ) -> JSONObject:
        conversation_id = conversation_id or new_conversation_id()
        created_at = int(time.time()) if created_at is None else created_at
        args: list[Any] = [
            self.ttl_s, created_at, dump(dict(metadata or {})), owner or "",
            *item_args(with_ids(items)),
        ]
        with translated_errors():
            _, stored_created_at, stored_metadata = await self._scripts.create_conversation(
                keys=ConversationKeys(conversation_id).all(), args=args
            )
        return conversation_object(
            conversation_id, int(stored_created_at), json.loads(stored_metadata)
        )

    async def get_conversation(self, conversation_id: str) -> StoredConversation | None:
        fields = ["created_at", "metadata", "owner"]
        with translated_errors():
            values = await self._redis.hmget(ConversationKeys(conversation_id).meta, fields)
        created_at, metadata, owner = values
        if created_at is None or metadata is None:
            return None
        return StoredConversation(
            conversation=conversation_object(
                conversation_id, int(created_at), json.loads(metadata)
            ),
            owner=(owner.decode() if isinstance(owner, bytes) else owner) if owner is not None else None,
        )

    async def update_conversation(
        self, conversation_id: str, metadata: Mapping[str, str]
    ) -> JSONObject | None:
        created_at = await self._write(conversation_id, "metadata", dump(dict(metadata)))
        if created_at is None:
            return None
        return conversation_object(conversation_id, int(created_at), metadata)

    async def delete_conversation(self, conversation_id: str) -> bool:
        keys = ConversationKeys(conversation_id)
        with translated_errors():
            async with self._redis.pipeline(transaction=True) as pipe:
                pipe.hexists(keys.meta, "created_at")
                pipe.delete(*keys.all())
                existed, _ = await pipe.execute()
        return bool(existed)

    async def add_conversation_items(
        self, conversation_id: str, items: Sequence[Mapping[str, Any]]
    ) -> list[JSONObject] | None:
        stored = with_ids(items)
        added = await self._write(conversation_id, "add", *item_args(stored))
        return stored if added is not None else None

    async def get_conversation_item(
        self, conversation_id: str, item_id: str
    ) -> JSONObject | None:
        with translated_errors():
            value = await self._redis.hget(ConversationKeys(conversation_id).items, item_id)
        return json.loads(value) if value is not None else None

    async def delete_conversation_item(self, conversation_id: str, item_id: str) -> bool:
        return bool(await self._write(conversation_id, "delete_item", item_id))

    async def conversation_items(
        self,
        conversation_id: str,
        *,
        after: str | None = None,
        before: str | None = None,
        limit: int = 20,
        order: PageOrder = "desc",
    ) -> ItemPage | None:
        return await read_page(
            self._scripts.page, ConversationKeys(conversation_id).all(), "created_at",
            after, before, limit, order,
        )

    async def _write(self, conversation_id: str, operation: str, *args: str) -> Any:
        """Run one conversation_write.lua operation; None when there is no conversation."""
        with translated_errors():
            return await self._scripts.conversation_write(
                keys=ConversationKeys(conversation_id).all(),
                args=[self.ttl_s, operation, *args],
            )
