"""Admission control: a bounded number of open responses per API replica."""

from __future__ import annotations

from api.errors import APIError


class Admission:
    def __init__(self, max_inflight: int, retry_after_s: int = 1) -> None:
        self.max_inflight = max_inflight
        self.inflight = 0
        self._retry_after = str(retry_after_s)

    def admit(self) -> None:
        """Take a slot or answer 429 with Retry-After; never queue without bound."""
        if self.inflight >= self.max_inflight:
            raise APIError(
                429,
                "Too many requests in flight on this server; retry shortly.",
                code="rate_limit_exceeded",
                headers={"Retry-After": self._retry_after},
            )
        self.inflight += 1

    def release(self) -> None:
        self.inflight = max(0, self.inflight - 1)
