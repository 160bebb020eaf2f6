"""Admission control: bounded responses per API replica and per API key.

A replica holds at most SPATE_MAX_INFLIGHT responses open, and one key (one owner; every
client is one shared owner when keys are off) at most SPATE_KEY_MAX_OPEN of them and
SPATE_KEY_MAX_RESUMES resumed streams. Background responses outlive their connection, so
their bound (SPATE_KEY_MAX_BACKGROUND) is counted in the store, shared by every replica
(store/background_slots.py). Past any bound: 429 with Retry-After and a message naming
the bound, before anything is published; nothing queues without bound.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import AsyncIterator

from api.errors import APIError
from store.background_slots import BackgroundSlots


class Slot:
    """One open response's hold on its bounds (the replica's, its key's); `release` gives
    them all back, once however often it is called."""

    __slots__ = ("_held", "_released")

    def __init__(self, held: list[tuple[Counter[str], str]]) -> None:
        for counts, key in held:
            counts[key] += 1
        self._held = held
        self._released = False

    def release(self) -> None:
        if self._released:
            return
        self._released = True
        for counts, key in self._held:
            counts[key] -= 1
            if counts[key] <= 0:
                del counts[key]


# The replica-wide count's one key; the shared owner's key when API keys are off.
_ALL = ""


class Admission:
    def __init__(
        self, max_inflight: int, key_max_open: int | None = None,
        key_max_resumes: int | None = None, retry_after_s: int = 1,
    ) -> None:
        self.max_inflight = max_inflight
        self.key_max_open = key_max_open or max_inflight
        self.key_max_resumes = key_max_resumes or max_inflight
        self._replica: Counter[str] = Counter()
        self._open: Counter[str] = Counter()
        self._resumes: Counter[str] = Counter()
        self._headers = {"Retry-After": str(retry_after_s)}

    @property
    def inflight(self) -> int:
        return self._replica[_ALL]

    def admit(self, owner: str | None) -> Slot:
        """Take a slot for a response this replica holds open, or answer 429."""
        key = owner or _ALL
        if self._replica[_ALL] >= self.max_inflight:
            raise self._refusal("Too many requests in flight on this server; retry shortly.")
        if self._open[key] >= self.key_max_open:
            raise self._refusal(
                f"This API key has {self.key_max_open} responses open on this server, its "
                "bound (SPATE_KEY_MAX_OPEN); retry when one ends.")
        return Slot([(self._replica, _ALL), (self._open, key)])

    def admit_resume(self, owner: str | None) -> Slot:
        """Take a slot for a resumed stream, or answer 429."""
        key = owner or _ALL
        if self._resumes[key] >= self.key_max_resumes:
            raise self._refusal(
                f"This API key is resuming {self.key_max_resumes} streams on this server, "
                "its bound (SPATE_KEY_MAX_RESUMES); retry when one ends.")
        return Slot([(self._resumes, key)])

    def _refusal(self, message: str) -> APIError:
        return APIError(429, message, code="rate_limit_exceeded", headers=self._headers)


@contextlib.asynccontextmanager
async def background_slot(
    slots: BackgroundSlots | None, limit: int, background: bool | None, owner: str | None,
    response_id: str,
) -> AsyncIterator[None]:
    """Around publishing a request: for a background one, a slot of its key's bound
    (`limit`, SPATE_KEY_MAX_BACKGROUND) held in the store's `slots` first (or 429), given
    back if publishing raises; the projection gives it back when the response ends. With
    the store off (`slots` None) nothing is held."""
    if not background or slots is None:
        yield
        return
    if not await slots.take(owner, response_id, limit):
        raise APIError(
            429, f"This API key has {limit} background responses that have not ended, its "
            "bound (SPATE_KEY_MAX_BACKGROUND); retry when one ends.",
            code="rate_limit_exceeded", headers={"Retry-After": "1"},
        )
    try:
        yield
    except BaseException:
        with contextlib.suppress(Exception):  # else the slot expires at its horizon
            await slots.give_back(owner, response_id)
        raise
