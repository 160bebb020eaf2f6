"""Contract: conversations in the official SDK's shapes, with their owner and items."""

from __future__ import annotations

import pytest

from store.base import Store
from tests.store.contract_base import ContractBase
from tests.store.projection import input_items_of


async def item_ids(store: Store, conversation_id: str) -> list[str]:
    page = await store.conversation_items(conversation_id, order="asc", limit=100)
    assert page is not None
    return [item["id"] for item in page.data]


class ConversationContract(ContractBase):
    async def test_create_and_get(self, store: Store) -> None:
        created = await store.create_conversation(
            metadata={"topic": "demo"}, items=input_items_of(2), owner="key-1"
        )
        assert created["id"].startswith("conv_")
        assert created["object"] == "conversation"
        assert isinstance(created["created_at"], int)
        assert created["metadata"] == {"topic": "demo"}
        stored = await store.get_conversation(created["id"])
        assert stored is not None
        assert (stored.conversation, stored.owner) == (created, "key-1")
        assert await item_ids(store, created["id"]) == ["msg_in0", "msg_in1"]

    async def test_an_unowned_conversation_without_metadata(self, store: Store) -> None:
        created = await store.create_conversation(created_at=1234)
        assert (created["metadata"], created["created_at"]) == ({}, 1234)
        stored = await store.get_conversation(created["id"])
        assert stored is not None and stored.owner is None
        page = await store.conversation_items(created["id"])
        assert page is not None and page.data == [] and page.has_more is False

    async def test_creating_an_existing_id_changes_nothing(self, store: Store) -> None:
        first = await store.create_conversation(metadata={"v": "1"}, items=input_items_of(1))
        again = await store.create_conversation(
            conversation_id=first["id"], metadata={"v": "2"}, items=input_items_of(3)
        )
        assert again == first
        assert await item_ids(store, first["id"]) == ["msg_in0"]

    async def test_update_replaces_the_metadata(self, store: Store) -> None:
        created = await store.create_conversation(metadata={"a": "1"})
        updated = await store.update_conversation(created["id"], {"b": "2"})
        assert updated == {**created, "metadata": {"b": "2"}}
        stored = await store.get_conversation(created["id"])
        assert stored is not None and stored.conversation == updated
        assert await store.update_conversation("conv_missing", {"b": "2"}) is None
        assert await store.get_conversation("conv_missing") is None

    async def test_added_items_follow_in_order_and_keep_their_ids(self, store: Store) -> None:
        created = await store.create_conversation(items=input_items_of(1))
        new = [
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "a"}]},
            {"type": "function_call", "call_id": "call_1", "name": "f", "arguments": "{}"},
            {"id": "fco_given", "type": "function_call_output", "call_id": "call_1", "output": "1"},
        ]
        added = await store.add_conversation_items(created["id"], new)
        assert added is not None
        assert added[0]["id"].startswith("msg_") and added[1]["id"].startswith("fc_")
        assert added[2]["id"] == "fco_given"
        assert [{k: v for k, v in item.items() if k != "id"} for item in added[:2]] == new[:2]
        assert await item_ids(store, created["id"]) == ["msg_in0", *(item["id"] for item in added)]
        assert await store.get_conversation_item(created["id"], "fco_given") == new[2]

    async def test_re_adding_items_by_id_is_idempotent(self, store: Store) -> None:
        created = await store.create_conversation(items=input_items_of(2))
        changed = [{**input_items_of(1)[0], "content": "changed"}, *input_items_of(3)[2:]]
        await store.add_conversation_items(created["id"], changed)
        await store.add_conversation_items(created["id"], changed)
        assert await item_ids(store, created["id"]) == ["msg_in0", "msg_in1", "msg_in2"]
        assert await store.get_conversation_item(created["id"], "msg_in0") == input_items_of(1)[0]

    async def test_items_of_a_missing_conversation(self, store: Store) -> None:
        assert await store.add_conversation_items("conv_missing", input_items_of(1)) is None
        assert await store.get_conversation("conv_missing") is None
        assert await store.conversation_items("conv_missing") is None
        assert await store.get_conversation_item("conv_missing", "msg_in0") is None
        assert await store.delete_conversation_item("conv_missing", "msg_in0") is False

    async def test_delete_one_item(self, store: Store) -> None:
        created = await store.create_conversation(items=input_items_of(3))
        assert await store.delete_conversation_item(created["id"], "msg_in1") is True
        assert await store.delete_conversation_item(created["id"], "msg_in1") is False
        assert await store.get_conversation_item(created["id"], "msg_in1") is None
        assert await item_ids(store, created["id"]) == ["msg_in0", "msg_in2"]
        page = await store.conversation_items(created["id"], after="msg_in0", order="asc")
        assert page is not None and [item["id"] for item in page.data] == ["msg_in2"]
        with pytest.raises(KeyError):
            await store.conversation_items(created["id"], after="msg_in1")

    async def test_delete_a_conversation(self, store: Store) -> None:
        created = await store.create_conversation(items=input_items_of(2), owner="key-1")
        assert await store.delete_conversation(created["id"]) is True
        assert await store.delete_conversation(created["id"]) is False
        assert await store.get_conversation(created["id"]) is None
        assert await store.get_conversation_item(created["id"], "msg_in0") is None
        assert await store.conversation_items(created["id"]) is None
        # Items added for a deleted conversation (a late projector) do not revive it.
        assert await store.add_conversation_items(created["id"], input_items_of(1)) is None
        assert await store.get_conversation(created["id"]) is None
