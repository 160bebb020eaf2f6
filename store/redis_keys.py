"""The Redis key layout, in one place: docs/store.md describes the same names.

Every key of one response (or conversation) carries its id in a hash tag (`{...}`), so
they share a Redis Cluster slot and one Lua script may touch them all.
"""

from __future__ import annotations

from dataclasses import dataclass

PREFIX = "spate"


# List: the projection's dead-letter records, newest first (JSON each).
DEAD_LETTERS_KEY = f"{PREFIX}:dead_letters"


def item_key(owner: str | None, item_id: str) -> str:
    """String: one input or output item of `owner` by id (item_reference inputs). The
    owner is a hex digest or 'shared', so ':' cannot occur in it."""
    return f"{PREFIX}:item:{{{owner or ''}:{item_id}}}"


@dataclass(frozen=True, slots=True)
class ResponseKeys:
    response_id: str

    @property
    def _base(self) -> str:
        return f"{PREFIX}:response:{{{self.response_id}}}"

    @property
    def meta(self) -> str:
        """Hash: next_seq, status, response, owner, cancelled, input_next, and once the
        response has ended `sealed` (the snapshot and the SSE events, deflated) instead
        of response, and sse_count; or a `deleted` tombstone."""
        return self._base

    @property
    def sse(self) -> str:
        """List: SSE event JSON, index = sequence_number, until the response is sealed."""
        return f"{self._base}:sse"

    @property
    def input_order(self) -> str:
        """Sorted set: input item id -> position."""
        return f"{self._base}:input:order"

    @property
    def input_items(self) -> str:
        """Hash: input item id -> item JSON."""
        return f"{self._base}:input:items"

    @property
    def notify(self) -> str:
        """Pub/sub channel (not a key): the last sequence_number, on each append."""
        return f"{self._base}:notify"

    def all(self) -> list[str]:
        """Every key, in the order the scripts take them as KEYS."""
        return [self.meta, self.sse, self.input_order, self.input_items]


@dataclass(frozen=True, slots=True)
class ConversationKeys:
    conversation_id: str

    @property
    def _base(self) -> str:
        return f"{PREFIX}:conversation:{{{self.conversation_id}}}"

    @property
    def meta(self) -> str:
        """Hash: conversation (object JSON), owner, next_position."""
        return self._base

    @property
    def order(self) -> str:
        """Sorted set: item id -> position."""
        return f"{self._base}:order"

    @property
    def items(self) -> str:
        """Hash: item id -> item JSON."""
        return f"{self._base}:items"

    def all(self) -> list[str]:
        return [self.meta, self.order, self.items]
