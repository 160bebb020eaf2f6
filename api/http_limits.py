"""The HTTP server's own bounds, from ApiSettings: connections at once, how long a request
head may take, how long an idle keep-alive connection is kept, how big a head may be.
Bodies are bounded as they are read (api/body.py)."""

from __future__ import annotations

import asyncio
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from api.settings import ApiSettings


class HeadDeadlineProtocol(H11Protocol):
    """uvicorn's h11 protocol with a deadline on each request head: a connection that
    has not sent a whole head within `head_timeout_s` of opening (or of its last
    response) is closed, so clients that trickle headers cannot hold connections
    forever. uvicorn's keep-alive timeout covers only a connection that sends nothing."""

    head_timeout_s: float = 10.0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._head_deadline: asyncio.TimerHandle | None = None
        self._arm_head_deadline()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._arm_head_deadline()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_head_deadline()
        super().connection_lost(exc)

    def _arm_head_deadline(self) -> None:
        self._disarm_head_deadline()
        if not self.transport.is_closing():
            self._head_deadline = self.loop.call_later(self.head_timeout_s, self._head_overdue)

    def _disarm_head_deadline(self) -> None:
        deadline = getattr(self, "_head_deadline", None)
        if deadline is not None:
            deadline.cancel()
            self._head_deadline = None

    def _head_overdue(self) -> None:
        self._head_deadline = None
        # IDLE: h11 has not seen a whole request head since the deadline was armed.
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            self.logger.info("closed a connection that sent no complete request head in %g s",
                             self.head_timeout_s)
            self.transport.close()


def server_options(settings: ApiSettings) -> dict[str, Any]:
    """uvicorn.Config arguments for the bounds in `settings`."""
    protocol = type("HeadDeadlineProtocol", (HeadDeadlineProtocol,),
                    {"head_timeout_s": settings.http_head_timeout_s})
    return {
        "http": protocol,
        # Past it uvicorn answers 503 at once, before the app sees the request.
        "limit_concurrency": settings.http_max_connections,
        "timeout_keep_alive": settings.http_keep_alive_s,
        "h11_max_incomplete_event_size": settings.http_max_head_bytes,
    }
