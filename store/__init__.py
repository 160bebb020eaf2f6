"""The optional response store: a projection of the event log into stored Responses, their
SSE events and input items, plus conversations and cancel marks.

Off unless SPATE_STORE_URL is set; until it is, `background` and `previous_response_id`
are 400s naming that variable and `store=true` runs unstored. The interface is
`store.base.Store`; `store.redis_store.RedisStore` is its Redis backend (docs/store.md).
"""

from store.base import DEFAULT_TTL_S, Store
from store.errors import SeqGap, StoreError, StoreUnavailable
from store.records import ItemPage, StoredConversation, StoredResponse

__all__ = [
    "DEFAULT_TTL_S",
    "ItemPage",
    "SeqGap",
    "Store",
    "StoreError",
    "StoreUnavailable",
    "StoredConversation",
    "StoredResponse",
]
