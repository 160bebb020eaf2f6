"""One process's connection to NATS: connect with retry, reconnect by itself, re-declare
the topology after a reconnect, drain on close."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import time
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import nats
from nats.aio.client import Client
from nats.js import JetStreamContext

from journal.errors import JournalUnavailable
from journal.settings import JournalSettings
from journal.topology import declare

log = logging.getLogger("spate.journal")

# How long close() waits for a cancelled connect to end. nats-py's connect can swallow a
# cancel while it dials a server that refuses (it ends its own attempt first, seconds
# later); the connector then stops at its next turn and closes what it opened.
CONNECT_CANCEL_WAIT_S = 0.2


def redacted(url: str) -> str:
    """The URL without credentials, for logs."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, f"***@{host}", parts.path, parts.query, parts.fragment))


def server_urls(nats_url: str) -> list[str]:
    """The servers a `SPATE_NATS_URL` names: one URL, or several separated by commas (the
    nodes of a cluster; the client finds the others from any of them, too)."""
    return [url.strip() for url in nats_url.split(",") if url.strip()]


def connect_options(settings: JournalSettings) -> dict[str, Any]:
    """The client's authentication and TLS options from the settings."""
    options: dict[str, Any] = {}
    if settings.nats_user is not None:
        options["user"] = settings.nats_user
    if settings.nats_password is not None:
        options["password"] = settings.nats_password.get_secret_value()
    if settings.nats_token is not None:
        options["token"] = settings.nats_token.get_secret_value()
    if settings.nats_nkey_seed_file is not None:
        options["nkeys_seed"] = settings.nats_nkey_seed_file
    if settings.nats_creds_file is not None:
        options["user_credentials"] = settings.nats_creds_file
    tls_files = (settings.nats_tls_ca_file, settings.nats_tls_cert_file, settings.nats_tls_key_file)
    if any(tls_files):
        context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=settings.nats_tls_ca_file)
        if settings.nats_tls_cert_file is not None:
            context.load_cert_chain(settings.nats_tls_cert_file, settings.nats_tls_key_file)
        options["tls"] = context
    return options


class Connection:
    def __init__(self, settings: JournalSettings, name: str, report_retries: bool = True) -> None:
        self.settings = settings
        self.name = name
        # False for a caller that waits for the first connection with a bound and says
        # itself that NATS cannot be reached: its retries are then debug lines, not a
        # warning every few seconds.
        self.report_retries = report_retries
        # Why the last attempt to connect failed, for the caller that gives up.
        self.last_error: str | None = None
        self.nc: Client | None = None
        self.js: JetStreamContext | None = None
        self._ready = asyncio.Event()
        self._connector: asyncio.Task[None] | None = None
        # Run after every (re)connect that declared the topology: parts that own
        # server-side state of their own (a worker's consumer) re-declare it here.
        self.on_declared: list[Callable[[], Awaitable[None]]] = []
        self._redeclaring: asyncio.Task[None] | None = None
        self._lost_at: float | None = None
        self._closing = False

    # -- lifecycle ---------------------------------------------------------------------

    def start(self) -> None:
        """Connect in the background; `connected` turns true once NATS answers."""
        if self._connector is None:
            self._connector = asyncio.create_task(self._connect_until_up())

    async def wait_connected(
        self, stop: asyncio.Event | None = None, timeout: float | None = None
    ) -> bool:
        """Wait until connected, or until `stop` is set; True when connected. Past
        `timeout` seconds without a connection, JournalUnavailable naming the servers and
        the last error (retrying goes on in the background until `close`)."""
        self.start()
        waits = [asyncio.ensure_future(self._ready.wait())]
        if stop is not None:
            waits.append(asyncio.ensure_future(stop.wait()))
        try:
            await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for wait in waits:
                wait.cancel()
        if self._ready.is_set() or (stop is not None and stop.is_set()):
            return self._ready.is_set()
        if timeout is not None:
            raise JournalUnavailable(
                f"cannot reach NATS at {self.where} within {timeout:g} s "
                f"({self.last_error or 'no answer'})")
        return False

    @property
    def where(self) -> str:
        """The configured servers, without credentials."""
        return ",".join(redacted(url) for url in server_urls(self.settings.nats_url))

    async def _connect_until_up(self) -> None:
        delay = 0.2
        servers = server_urls(self.settings.nats_url)
        where = self.where
        while True:
            try:
                nc = await nats.connect(
                    servers,
                    **connect_options(self.settings),
                    name=self.name,
                    connect_timeout=self.settings.nats_timeout_s,
                    max_reconnect_attempts=-1,
                    reconnect_time_wait=0.5,
                    drain_timeout=5,
                    error_cb=self._on_error,
                    disconnected_cb=self._on_disconnected,
                    reconnected_cb=self._on_reconnected,
                )
                if self._closing:
                    await nc.close()
                    return
                js = nc.jetstream(timeout=self.settings.nats_timeout_s)
                await declare(js, self.settings)
                self.nc, self.js = nc, js
                self._ready.set()
                log.info("connected to NATS at %s", where)
                if not self.fences_writes:
                    log.warning("nats-server %s cannot fence stale workers (2.11 or later "
                                "can): a worker frozen past the ack wait may still write",
                                nc.connected_server_version)
                return
            except Exception as error:  # keep trying: NATS may come up after us
                if self._closing:
                    return
                self.last_error = str(error) or type(error).__name__
                log.log(logging.WARNING if self.report_retries else logging.DEBUG,
                        "NATS at %s not reachable (%s); retrying", where, self.last_error)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)

    async def close(self) -> None:
        self._closing = True
        for task in (self._connector, self._redeclaring):
            if task is not None and not task.done():
                task.cancel()
                await asyncio.wait({task}, timeout=CONNECT_CANCEL_WAIT_S)
        if self.nc is not None and not self.nc.is_closed:
            with contextlib.suppress(Exception):
                await self.nc.drain()

    @property
    def connected(self) -> bool:
        return self._ready.is_set() and self.nc is not None and self.nc.is_connected

    @property
    def fences_writes(self) -> bool:
        """Whether the server can check a publish against another subject's last sequence
        (nats-server 2.11+), which fencing by lease needs (journal/lease.py)."""
        try:
            version = self.client().connected_server_version
            return (version.major, version.minor) >= (2, 11)
        except Exception:  # not connected, or a version string it cannot read
            return False

    def outage_s(self) -> float:
        """How long the connection has been down (0 while it is up)."""
        if self.connected or self._lost_at is None:
            return 0.0
        return time.monotonic() - self._lost_at

    def require(self) -> JetStreamContext:
        """The JetStream context, or JournalUnavailable while NATS is away."""
        if not self.connected or self.js is None:
            raise JournalUnavailable("The message bus (NATS) is unavailable.")
        return self.js

    def require_client(self) -> Client:
        """The core NATS client, or JournalUnavailable while NATS is away."""
        if not self.connected or self.nc is None:
            raise JournalUnavailable("The message bus (NATS) is unavailable.")
        return self.nc

    def client(self) -> Client:
        """The core NATS client once it first connected: while it reconnects it buffers
        what is published and resubscribes by itself."""
        if self.nc is None:
            raise JournalUnavailable("The message bus (NATS) is unavailable.")
        return self.nc

    # -- callbacks ---------------------------------------------------------------------

    async def _on_error(self, error: Exception) -> None:
        # The client retries a first connection itself, reporting each failure here.
        self.last_error = str(error) or type(error).__name__
        quiet = not self.report_retries and not self._ready.is_set()
        log.log(logging.DEBUG if quiet else logging.WARNING, "NATS error: %s", error)

    async def _on_disconnected(self) -> None:
        if self._closing:  # our own drain: nothing was lost
            log.debug("disconnected from NATS (closing)")
            return
        log.warning("disconnected from NATS")
        if self._lost_at is None:
            self._lost_at = time.monotonic()

    async def _on_reconnected(self) -> None:
        log.info("reconnected to NATS")
        self._lost_at = None
        if self._redeclaring is None or self._redeclaring.done():
            self._redeclaring = asyncio.create_task(self._redeclare())

    async def _redeclare(self) -> None:
        """A server that restarted without its data has no streams: declare them again."""
        delay = 0.2
        while True:
            try:
                if self.js is not None:
                    await declare(self.js, self.settings)
                for hook in self.on_declared:
                    await hook()
                return
            except Exception as error:
                log.warning("re-declaring streams after a reconnect failed (%s); retrying", error)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
