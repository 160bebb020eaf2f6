"""The store interface: what the projector writes and the routes read, on any backend.

Every method raises `StoreUnavailable` when the backend cannot be reached and never a
backend's own exception; `tests/store/contract.py` is the suite every backend passes.
Responses are a projection of the event log (idempotent by response id and seq);
conversations and cancel marks are written by the API directly.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from store.records import ItemPage, JSONObject, PageOrder, StoredConversation, StoredResponse

# How long a response or conversation is kept after its last write (SPATE_STORE_TTL_S).
DEFAULT_TTL_S = 30 * 24 * 3600
# Dead-letter records kept (the projection's events it gave up on).
DEAD_LETTERS_KEPT = 1000


class Store(ABC):
    ttl_s: int

    async def close(self) -> None:  # noqa: B027 - a backend with nothing to close keeps it
        """Release connections; the store is not used after."""

    @abstractmethod
    async def ping(self) -> None:
        """Return when the backend answers; raise `StoreUnavailable` otherwise."""

    # -- projected responses ------------------------------------------------------------

    @abstractmethod
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
        """Apply `events` consecutive events of a response's log (seqs `seq` ..
        `seq + events - 1`: a batch is one write), atomically, if `seq` is the next one.

        Stores the SSE events the fold produced for them (numbered on from the ones
        already stored), the status after them and, when given, the new Response
        snapshot (None keeps the last one). `owner` and `input_items` are meant for seq
        0; an owner, once set, is kept. Input items without an `id` get one. The raw
        events stay in the log (JetStream), not here. Returns True when applied; False
        when every seq was applied already (a redelivery or a replay) or the response
        is deleted. Raises `SeqGap` when `seq` is not the next one and the run is not
        all applied (a gap, or a run that overlaps the applied events).
        """

    @abstractmethod
    async def get_response(self, response_id: str) -> StoredResponse | None:
        """The projected response, or None (never stored, deleted or expired)."""

    @abstractmethod
    async def next_seq(self, response_id: str) -> int:
        """The seq the next `append` must carry: 0 for a response not stored yet."""

    @abstractmethod
    async def sse_events(self, response_id: str, after: int = -1) -> list[JSONObject]:
        """The stored SSE events with `sequence_number` > `after`, in order."""

    @abstractmethod
    def follow_sse(
        self, response_id: str, after: int = -1, *, idle_timeout_s: float | None = None
    ) -> AsyncIterator[JSONObject]:
        """The SSE events after `after`: the stored ones, then each new one as it is
        appended, ending after a terminal event (`response.completed`, `.incomplete`,
        `.failed`). Raises `TimeoutError` when nothing new comes for `idle_timeout_s`."""

    @abstractmethod
    async def input_items(
        self,
        response_id: str,
        *,
        after: str | None = None,
        before: str | None = None,
        limit: int = 20,
        order: PageOrder = "desc",
    ) -> ItemPage | None:
        """A page of the response's input items; None when the response is not stored.

        The page lists, in `order`, the items strictly between the `after` and `before`
        cursors (item ids): from `after` on when only `after` (or neither) is given, the
        `limit` items just before `before` when `before` is given. `has_more` says items
        lie beyond the page in the direction it was read. An id that is not in the list
        raises `KeyError`.
        """

    @abstractmethod
    async def dead_letter(self, response_id: str, seq: int, error: str) -> None:
        """Record an event the projection could not apply and skips from now on (the
        newest DEAD_LETTERS_KEPT are kept), with the error it failed with."""

    @abstractmethod
    async def dead_letters(self) -> list[JSONObject]:
        """The dead-letter records, newest first: response_id, seq, error, at (epoch s)."""

    @abstractmethod
    async def delete_response(self, response_id: str) -> bool:
        """Delete a stored response; True when there was one. Later appends of its events
        (a replay) are no-ops, so a deleted response stays deleted."""

    @abstractmethod
    async def mark_cancelled(self, response_id: str) -> bool:
        """Mark a response cancelled; True the first time, False when already marked."""

    @abstractmethod
    async def is_cancelled(self, response_id: str) -> bool:
        """Whether `mark_cancelled` was called for the response."""

    # -- items by id (item_reference inputs) ----------------------------------------------

    @abstractmethod
    async def put_items(self, items: Sequence[Mapping[str, Any]], owner: str | None) -> None:
        """Keep each item (it has an `id`) for later lookup by `owner` and id: ids are
        scoped by owner, so two owners' items with one id never touch. An id stored again
        by its owner is overwritten (a replay changes nothing)."""

    @abstractmethod
    async def get_item(self, item_id: str, owner: str | None) -> JSONObject | None:
        """The item `owner` kept by `put_items` under `item_id`, or None."""

    # -- conversations ------------------------------------------------------------------

    @abstractmethod
    async def create_conversation(
        self,
        *,
        metadata: Mapping[str, str] | None = None,
        items: Sequence[Mapping[str, Any]] = (),
        owner: str | None = None,
        conversation_id: str | None = None,
        created_at: int | None = None,
    ) -> JSONObject:
        """Create a conversation (id `conv_...` unless given) with its first items and
        return the conversation object. Creating an id that exists changes nothing and
        returns the stored object, so a retried create is harmless."""

    @abstractmethod
    async def get_conversation(self, conversation_id: str) -> StoredConversation | None:
        """The conversation and its owner, or None."""

    @abstractmethod
    async def update_conversation(
        self, conversation_id: str, metadata: Mapping[str, str]
    ) -> JSONObject | None:
        """Replace the metadata; the updated object, or None when there is no such one."""

    @abstractmethod
    async def delete_conversation(self, conversation_id: str) -> bool:
        """Delete a conversation and its items; True when there was one."""

    @abstractmethod
    async def add_conversation_items(
        self, conversation_id: str, items: Sequence[Mapping[str, Any]]
    ) -> list[JSONObject] | None:
        """Append items in order; returns them with their ids, or None when there is no
        such conversation. An item whose id is already in the conversation is skipped
        (neither moved nor changed), so re-adding a response's items is idempotent."""

    @abstractmethod
    async def get_conversation_item(
        self, conversation_id: str, item_id: str
    ) -> JSONObject | None:
        """One item, or None."""

    @abstractmethod
    async def delete_conversation_item(self, conversation_id: str, item_id: str) -> bool:
        """Remove one item; True when it was there."""

    @abstractmethod
    async def conversation_items(
        self,
        conversation_id: str,
        *,
        after: str | None = None,
        before: str | None = None,
        limit: int = 20,
        order: PageOrder = "desc",
    ) -> ItemPage | None:
        """A page of the conversation's items (cursors as `input_items`), or None."""
