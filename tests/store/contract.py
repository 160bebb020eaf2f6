"""The one suite every store backend passes: subclass `StoreContract` and provide the
fixtures of `ContractBase` (see test_redis_store.py)."""

from __future__ import annotations

from tests.store.conversation_contract import ConversationContract
from tests.store.failure_contract import FailureContract
from tests.store.follow_contract import FollowContract
from tests.store.item_contract import ItemContract
from tests.store.lifetime_contract import LifetimeContract
from tests.store.paging_contract import PagingContract
from tests.store.response_contract import ResponseContract


class StoreContract(
    ResponseContract,
    FollowContract,
    PagingContract,
    ConversationContract,
    ItemContract,
    LifetimeContract,
    FailureContract,
):
    """Idempotent appends and their reads, following, paging, conversations, TTLs and
    failure, against a real backend."""
