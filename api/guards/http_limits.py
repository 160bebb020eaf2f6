"""The HTTP server's own bounds, from ApiSettings: connections at once, how long a request
head may take, how long an idle keep-alive connection is kept, how big a head may be.
Bodies are bounded as they are read (api/schema/body.py)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from api.errors import APIError
from api.settings import ApiSettings

HEAD_TOO_LARGE = 431


class BoundedHeadConnection(h11.Connection):
    """h11's server side with a bound on each whole request head (request line, headers
    and the blank line), however it arrives. h11's own bound, `max_incomplete_event_size`,
    looks only at a head still incomplete after a read: it keeps what is buffered bounded
    while a head comes in pieces, but a head that arrives whole in one read (70 kB in one
    write, say) passes it. Here the bytes each parsed head took are counted too."""

    def __init__(self, max_head_bytes: int) -> None:
        super().__init__(h11.SERVER, max_incomplete_event_size=max_head_bytes)
        self.max_head_bytes = max_head_bytes
        # Set when the head in hand is past the bound, for the protocol's answer.
        self.head_too_large = False

    def next_event(self) -> h11.Event | type[h11.NEED_DATA] | type[h11.PAUSED]:
        if self.their_state is not h11.IDLE:
            return super().next_event()
        # A private attribute, read for its length alone: `trailing_data`, the public
        # view, copies the buffer, at every read of a trickled head.
        buffered = len(self._receive_buffer)
        try:
            event = super().next_event()
        except h11.RemoteProtocolError as error:
            # 431 is h11's hint for an incomplete head past max_incomplete_event_size.
            self.head_too_large = error.error_status_hint == HEAD_TOO_LARGE
            raise
        if isinstance(event, h11.Request) and buffered - len(self._receive_buffer) > self.max_head_bytes:
            self.head_too_large = True
            raise h11.RemoteProtocolError("request head too large", error_status_hint=HEAD_TOO_LARGE)
        return event


class BoundedHeadProtocol(H11Protocol):
    """uvicorn's h11 protocol with two bounds on each request head.

    A deadline: a connection that has not sent a whole head within `head_timeout_s` of
    opening (or of its last response) is closed, so clients that trickle headers cannot
    hold connections forever. uvicorn's keep-alive timeout covers only a connection that
    sends nothing.

    A size: a head over `max_head_bytes` is answered 431 with an error body naming the
    setting, and the connection closed; no more of it than that (plus one read) is held."""

    head_timeout_s: float = 10.0
    max_head_bytes: int = 16 * 1024

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.conn = BoundedHeadConnection(self.max_head_bytes)

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

    def send_400_response(self, msg: str) -> None:
        # uvicorn answers every malformed head with this plain-text 400; a head past the
        # bound gets its own status and an OpenAI-style body instead.
        conn = self.conn
        if not (isinstance(conn, BoundedHeadConnection) and conn.head_too_large):
            super().send_400_response(msg)
            return
        self.logger.info("refused a request head over %d bytes", self.max_head_bytes)
        error = APIError(HEAD_TOO_LARGE,
                         f"The request head (request line and headers) exceeds "
                         f"{self.max_head_bytes} bytes (SPATE_HTTP_MAX_HEAD_BYTES).",
                         code="request_head_too_large")
        body = json.dumps(error.body()).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body)),
                   (b"connection", b"close")]
        for event in (h11.Response(status_code=HEAD_TOO_LARGE, headers=headers,
                                   reason=b"Request Header Fields Too Large"),
                      h11.Data(data=body), h11.EndOfMessage()):
            self.transport.write(conn.send(event))
        self.transport.close()


def server_options(settings: ApiSettings) -> dict[str, Any]:
    """uvicorn.Config arguments for the bounds in `settings`."""
    protocol = type("BoundedHeadProtocol", (BoundedHeadProtocol,),
                    {"head_timeout_s": settings.http_head_timeout_s,
                     "max_head_bytes": settings.http_max_head_bytes})
    return {
        "http": protocol,
        # Past it uvicorn answers 503 at once, before the app sees the request.
        "limit_concurrency": settings.http_max_connections,
        "timeout_keep_alive": settings.http_keep_alive_s,
    }
