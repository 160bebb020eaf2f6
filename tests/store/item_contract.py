"""Contract: items kept by id (what an item_reference input resolves to), with their owner
and the store's TTL."""

from __future__ import annotations

import uuid

from store.base import Store
from tests.store.contract_base import ContractBase


class ItemContract(ContractBase):
    async def test_items_read_back_by_id_with_their_owner(self, store: Store) -> None:
        first, second = (f"msg_{uuid.uuid4().hex}" for _ in range(2))
        items = [
            {"id": first, "type": "message", "role": "user", "status": "completed",
             "content": [{"type": "input_text", "text": "hi"}]},
            {"id": second, "type": "function_call", "call_id": "call_1", "name": "f",
             "arguments": "{}", "status": "completed"},
        ]
        await store.put_items(items, "key-1")
        await store.put_items(items[:1], "key-1")  # a replay changes nothing
        assert await store.get_item(first, "key-1") == items[0]
        assert await store.get_item(second, "key-1") == items[1]
        assert await store.get_item("msg_never_stored", "key-1") is None

    async def test_item_ids_are_scoped_by_owner(self, store: Store) -> None:
        item_id = f"msg_{uuid.uuid4().hex}"
        mine = {"id": item_id, "type": "message", "content": "key-1's"}
        theirs = {"id": item_id, "type": "message", "content": "key-2's"}
        await store.put_items([mine], "key-1")
        await store.put_items([theirs], "key-2")  # the same id: key-1's item is untouched
        assert await store.get_item(item_id, "key-1") == mine
        assert await store.get_item(item_id, "key-2") == theirs
        assert await store.get_item(item_id, "key-3") is None

    async def test_unowned_items(self, store: Store) -> None:
        item_id = f"msg_{uuid.uuid4().hex}"
        await store.put_items([{"id": item_id, "type": "message"}], None)
        assert await store.get_item(item_id, None) == {"id": item_id, "type": "message"}
