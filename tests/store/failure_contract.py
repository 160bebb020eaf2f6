"""Contract: with its backend down, every store call raises StoreUnavailable, soon."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from store.base import Store
from store.errors import StoreUnavailable
from tests.store.contract_base import ContractBase
from tests.store.projection import input_items_of

RESPONSE = "resp_unreachable"
CONVERSATION = "conv_unreachable"


async def _first_followed(store: Store) -> Any:
    return await anext(aiter(store.follow_sse(RESPONSE)))


CALLS: dict[str, Callable[[Store], Awaitable[Any]]] = {
    "ping": lambda store: store.ping(),
    "append": lambda store: store.append(
        RESPONSE, 0, sse_events=[], status="queued", response={}
    ),
    "get_response": lambda store: store.get_response(RESPONSE),
    "next_seq": lambda store: store.next_seq(RESPONSE),
    "sse_events": lambda store: store.sse_events(RESPONSE),
    "follow_sse": _first_followed,
    "input_items": lambda store: store.input_items(RESPONSE),
    "delete_response": lambda store: store.delete_response(RESPONSE),
    "mark_cancelled": lambda store: store.mark_cancelled(RESPONSE),
    "dead_letter": lambda store: store.dead_letter(RESPONSE, 0, "ValueError: refused"),
    "dead_letters": lambda store: store.dead_letters(),
    "is_cancelled": lambda store: store.is_cancelled(RESPONSE),
    "create_conversation": lambda store: store.create_conversation(items=input_items_of(1)),
    "get_conversation": lambda store: store.get_conversation(CONVERSATION),
    "update_conversation": lambda store: store.update_conversation(CONVERSATION, {}),
    "delete_conversation": lambda store: store.delete_conversation(CONVERSATION),
    "add_conversation_items": lambda store: store.add_conversation_items(
        CONVERSATION, input_items_of(1)
    ),
    "get_conversation_item": lambda store: store.get_conversation_item(CONVERSATION, "msg_in0"),
    "delete_conversation_item": lambda store: store.delete_conversation_item(
        CONVERSATION, "msg_in0"
    ),
    "conversation_items": lambda store: store.conversation_items(CONVERSATION),
    "put_items": lambda store: store.put_items(input_items_of(1), None),
    "get_item": lambda store: store.get_item("msg_in0", "key-1"),
}


class FailureContract(ContractBase):
    def test_every_call_is_covered(self) -> None:
        abstract = getattr(Store, "__abstractmethods__", frozenset())
        assert set(CALLS) == set(abstract)

    @pytest.mark.parametrize("name", sorted(CALLS))
    async def test_a_stopped_backend_is_store_unavailable(
        self, unavailable_store: Store, name: str
    ) -> None:
        started = time.monotonic()
        with pytest.raises(StoreUnavailable):
            await CALLS[name](unavailable_store)
        # The API answers 503 promptly rather than after a long client-side backoff.
        assert time.monotonic() - started < 5
