"""Contract: every key of a response or conversation expires after the store's TTL,
counted from its last write, and an expired one reads as absent."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from tests.store.contract_base import ContractBase, StoreFactory
from tests.store.projection import input_items_of, new_response_id, project, response_log, steps


class LifetimeContract(ContractBase):
    async def test_response_keys_expire_and_writes_refresh_them(
        self, make_store: StoreFactory
    ) -> None:
        short, long = make_store(ttl_s=1000), make_store(ttl_s=5000)
        try:
            response_id = new_response_id()
            log_steps = steps(response_log(response_id))
            await log_steps[0].append_to(short, input_items=input_items_of(2))
            ttls = await self.remaining_ttls("response", response_id)
            assert ttls and all(900 < ttl <= 1000 for ttl in ttls)
            await log_steps[1].append_to(long)
            ttls = await self.remaining_ttls("response", response_id)
            assert ttls and all(4900 < ttl <= 5000 for ttl in ttls)
            await short.mark_cancelled(response_id)
            assert all(ttl <= 1000 for ttl in await self.remaining_ttls("response", response_id))
            await short.delete_response(response_id)
            # The tombstone that keeps it deleted expires too.
            ttls = await self.remaining_ttls("response", response_id)
            assert all(0 < ttl <= 1000 for ttl in ttls)
        finally:
            await short.close()
            await long.close()

    async def test_conversation_keys_expire_and_writes_refresh_them(
        self, make_store: StoreFactory
    ) -> None:
        short, long = make_store(ttl_s=1000), make_store(ttl_s=5000)
        try:
            conversation = await short.create_conversation(items=input_items_of(2))
            conversation_id = conversation["id"]
            ttls = await self.remaining_ttls("conversation", conversation_id)
            assert len(ttls) >= 1 and all(900 < ttl <= 1000 for ttl in ttls)
            writes: list[Callable[[], Awaitable[object]]] = [
                lambda: long.add_conversation_items(conversation_id, input_items_of(3)),
                lambda: long.update_conversation(conversation_id, {"k": "v"}),
                lambda: long.delete_conversation_item(conversation_id, "msg_in0"),
            ]
            for write in writes:
                await short.update_conversation(conversation_id, {})
                await write()
                ttls = await self.remaining_ttls("conversation", conversation_id)
                assert ttls and all(4900 < ttl <= 5000 for ttl in ttls)
        finally:
            await short.close()
            await long.close()

    async def test_an_expired_response_and_conversation_are_gone(
        self, make_store: StoreFactory
    ) -> None:
        store = make_store(ttl_s=1)
        try:
            response_id = new_response_id()
            await project(store, response_log(response_id), input_items=input_items_of(1))
            conversation = await store.create_conversation(items=input_items_of(1))
            await asyncio.sleep(1.3)  # the point: past the 1 s lifetime, nothing is left
            assert await store.get_response(response_id) is None
            assert await store.sse_events(response_id) == []
            assert await store.input_items(response_id) is None
            assert await store.get_conversation(conversation["id"]) is None
            assert await store.conversation_items(conversation["id"]) is None
        finally:
            await store.close()
