"""What store reads return: a stored Response, a conversation, one page of items."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

JSONObject = dict[str, Any]
PageOrder = Literal["asc", "desc"]


@dataclass(frozen=True, slots=True)
class StoredResponse:
    """A response as projected so far."""

    # The Response object after the last applied event (the fold's `response()`).
    response: JSONObject
    status: str
    # The API key id that created it; None when keys are off.
    owner: str | None
    # The seq the store expects next: one past the last applied event.
    next_seq: int
    # Set by `mark_cancelled`; stays set whatever the log says later.
    cancelled: bool


@dataclass(frozen=True, slots=True)
class StoredConversation:
    # In the SDK's shape: id, object "conversation", created_at, metadata.
    conversation: JSONObject
    owner: str | None


@dataclass(frozen=True, slots=True)
class ItemPage:
    """One page of a cursor-paged item list, in the requested order."""

    data: list[JSONObject]
    has_more: bool

    @property
    def first_id(self) -> str | None:
        return self.data[0]["id"] if self.data else None

    @property
    def last_id(self) -> str | None:
        return self.data[-1]["id"] if self.data else None

    def list_object(self) -> JSONObject:
        """The body of a list endpoint (`object: "list"`), as the official SDK reads it."""
        return {
            "object": "list",
            "data": self.data,
            "first_id": self.first_id,
            "last_id": self.last_id,
            "has_more": self.has_more,
        }
