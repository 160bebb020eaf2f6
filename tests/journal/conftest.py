"""A journal connected to the session's real nats-server, closed after each test."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from cli.nats_server import EmbeddedNats
from journal import Journal, JournalSettings


async def connect(url: str, name: str = "spate-test", **settings: object) -> Journal:
    journal = Journal(JournalSettings(nats_url=url, **settings), name=name)  # type: ignore[arg-type]
    journal.start()
    if not await journal.wait_connected():
        raise TimeoutError("the journal did not connect")
    return journal


async def readers(journal: Journal, stream: str, subject: str) -> set[str]:
    """The names of `stream`'s consumers that read `subject`: a tail started since the last
    look has subscribed once a name is new."""
    infos = await journal.connection.require().consumers_info(stream)
    return {info.name for info in infos if info.config.filter_subject == subject}


@pytest.fixture
async def journal(nats_server: EmbeddedNats) -> AsyncIterator[Journal]:
    connected = await connect(nats_server.url)
    try:
        yield connected
    finally:
        await connected.close()
