"""The API's HTTP server: uvicorn, whose first SIGTERM or SIGINT drains (api/guards/drain.py)
before uvicorn's own shutdown; a second one stops at once."""

from __future__ import annotations

import asyncio
import ipaddress
from types import FrameType
from typing import Any

import uvicorn

from api.guards.drain import Drain
from api.settings import ApiSettings


def open_without_keys(settings: ApiSettings) -> str | None:
    """A warning when the API listens beyond this machine with no API keys: anyone who
    can reach the port can then spend its GPUs and read every stored response."""
    if settings.api_key_set or _loopback(settings.host):
        return None
    return (f"The API listens on {settings.host}:{settings.port}, beyond this machine, and "
            "SPATE_API_KEYS is empty: anyone who can reach it can generate, and read or "
            "delete every stored response. Set SPATE_API_KEYS, or SPATE_HOST=127.0.0.1.")


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:  # a host name: it may resolve anywhere
        return False


class DrainingServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, drain: Drain) -> None:
        super().__init__(config)
        self._drain = drain
        self._loop: asyncio.AbstractEventLoop | None = None
        self._draining: asyncio.Task[None] | None = None

    async def serve(self, sockets: Any = None) -> None:
        self._loop = asyncio.get_running_loop()
        await super().serve(sockets)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self._loop is None or self._draining is not None or self.should_exit:
            super().handle_exit(sig, frame)
            return
        # A signal handler runs between two bytecodes of the loop's thread: hand the
        # drain to the loop, then let uvicorn stop.
        def start() -> None:
            self._draining = asyncio.create_task(self._drain_then_exit(sig, frame))

        self._loop.call_soon_threadsafe(start)

    async def _drain_then_exit(self, sig: int, frame: FrameType | None) -> None:
        try:
            await self._drain.run()
        finally:
            super().handle_exit(sig, frame)
