"""Rate-limit state shared by every API replica: one entry per limit subject (a key group,
or an owner digest: never an API key) in the RATE_LIMITS bucket, changed by
compare-and-set on its revision, so two replicas admitting at once cannot both spend
the same budget. What an entry holds and how it changes is the caller's
(api/guards/gcra.py); the journal only reads, writes and retries.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TypeVar

from nats.js.errors import KeyNotFoundError, KeyWrongLastSequenceError
from nats.js.kv import KeyValue

from events.subjects import RATE_LIMITS_BUCKET
from journal.connection import Connection
from journal.errors import JournalUnavailable

# Compare-and-set tries of one change before giving up: a replica's own changes of one
# subject run one at a time, so only other replicas' changes of that subject make a try
# fail.
CHANGE_TRIES = 16

T = TypeVar("T")
# Given the subject's stored state (None: none yet), the state to store (None: leave it
# as it is) and the answer for the caller.
Step = Callable[[bytes | None], tuple[bytes | None, T]]


class ContentionExceeded(Exception):
    """Other replicas changed the subject's entry at every one of CHANGE_TRIES tries."""


class RateLimitStates:
    def __init__(self, connection: Connection) -> None:
        self._connection = connection
        self._bucket: KeyValue | None = None
        # What this replica last read or wrote for each subject (revision, value): a
        # change is tried on it first, so an uncontended change is one round trip.
        self._known: dict[str, tuple[int, bytes]] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    async def change(self, subject: str, step: Step[T]) -> T:
        """Apply `step` to `subject`'s entry and store what it returns, retried on the
        latest entry while another replica's write comes between. JournalUnavailable
        when NATS does not answer; ContentionExceeded past CHANGE_TRIES."""
        lock = self._locks.setdefault(subject, asyncio.Lock())
        async with lock:
            try:
                return await asyncio.wait_for(
                    self._change(subject, step), self._connection.settings.nats_timeout_s * 2)
            except (ContentionExceeded, JournalUnavailable):
                raise
            except Exception as error:
                self._bucket = None
                self._known.pop(subject, None)
                raise JournalUnavailable(f"Could not change a rate limit: {error!r}") from error

    async def _change(self, subject: str, step: Step[T]) -> T:
        bucket = await self._open()
        known = self._known.get(subject)
        for _ in range(CHANGE_TRIES):
            if known is None:
                known = await _read(bucket, subject)
            revision, value = known
            stored, answer = step(value if revision else None)
            if stored is None:
                return answer
            try:
                if revision:
                    new_revision = await bucket.update(subject, stored, last=revision)
                else:
                    new_revision = await bucket.create(subject, stored)
            except KeyWrongLastSequenceError:  # someone wrote (or it expired) since
                known = None
                continue
            self._known[subject] = (new_revision, stored)
            return answer
        self._known.pop(subject, None)
        raise ContentionExceeded(f"the rate limit {subject} changed under {CHANGE_TRIES} tries")

    async def _open(self) -> KeyValue:
        if self._bucket is None:
            self._bucket = await self._connection.require().key_value(RATE_LIMITS_BUCKET)
        return self._bucket


async def _read(bucket: KeyValue, subject: str) -> tuple[int, bytes]:
    """The entry's revision and value; revision 0 when it has none (never written,
    expired, or deleted: `create` takes each of those)."""
    try:
        entry = await bucket.get(subject)
    except KeyNotFoundError:
        return 0, b""
    return entry.revision or 0, entry.value or b""
