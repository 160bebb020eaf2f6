"""Shutting an API replica down without dropping its clients: on SIGTERM it stops taking
requests (503, `/ready` not ready), lets open responses finish for up to
`SPATE_DRAIN_TIMEOUT_S`, then cuts the rest with a resumable end, never a cancel: their
generation goes on in the workers and into the log."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from api.errors import APIError

log = logging.getLogger("spate.api.drain")

SHUTTING_DOWN = "server_shutting_down"
# After the cut, how long the cut streams get to send their last event and close.
CUT_GRACE_S = 3.0


class Drain:
    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self.draining = False
        # Set when the drain timeout ran out: open responses end now.
        self.cut = asyncio.Event()
        self.open = 0
        self._changed = asyncio.Event()

    @contextmanager
    def track(self) -> Iterator[None]:
        """Count one open response for as long as it is served."""
        self.open += 1
        try:
            yield
        finally:
            self.open -= 1
            self._changed.set()

    def refusal(self) -> APIError:
        return APIError(503, "The server is shutting down; send the request to another replica.",
                        code=SHUTTING_DOWN, headers={"Retry-After": "1"})

    async def run(self) -> None:
        """Refuse new requests, wait for open responses up to the timeout, cut the rest."""
        self.draining = True
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout_s
        log.info("shutting down: %d open responses get %.0f s to finish", self.open, self.timeout_s)
        await self._wait_closed(deadline)
        if self.open:
            log.warning("cutting %d open responses: they go on in the workers and can be "
                        "resumed from the log", self.open)
            self.cut.set()
            await self._wait_closed(loop.time() + CUT_GRACE_S)

    async def _wait_closed(self, deadline: float) -> None:
        loop = asyncio.get_running_loop()
        while self.open and loop.time() < deadline:
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), deadline - loop.time())
            except asyncio.TimeoutError:
                return


class DrainGate:
    """ASGI middleware: while draining, every new request but `/health` gets a 503."""

    def __init__(self, app: Any, drain: Drain) -> None:
        self.app = app
        self.drain = drain

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not self.drain.draining or scope["path"] == "/health":
            await self.app(scope, receive, send)
            return
        await self.drain.refusal().response()(scope, receive, send)
