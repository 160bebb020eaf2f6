"""What a store call can raise: one type for "the store is down", one for a refused event.

Every backend raises these and nothing else of its own, so the API maps them once (503
for `StoreUnavailable`) and the projector handles a gap without knowing the backend.
"""

from __future__ import annotations


class StoreError(Exception):
    """A store call failed for a reason that is not the caller's input."""


class StoreUnavailable(StoreError):
    """The store cannot be reached (refused, timed out, connection lost, still loading)."""


class SeqGap(StoreError):
    """An event arrived ahead of the next one the store expects for that response.

    Nothing was written. The projector reads the log from `expected` and appends again.
    """

    def __init__(self, response_id: str, expected: int, got: int) -> None:
        super().__init__(
            f"response {response_id!r}: the store expects seq {expected}, got {got}"
        )
        self.response_id = response_id
        self.expected = expected
        self.got = got
