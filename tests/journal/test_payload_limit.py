"""A request event over the server's max_payload: refused before any publish, so it
holds none of the client's pending-ack slots and leaves nothing in the log."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from cli.nats_server import EmbeddedNats
from events import ChatMessage, RequestAccepted
from journal import PayloadTooLarge
from tests.journal.conftest import connect

MAX_PAYLOAD = 16 * 1024


@pytest.fixture(scope="module")
def small_nats() -> Iterator[EmbeddedNats]:
    config = Path(tempfile.mkdtemp(prefix="spate-nats-conf-")) / "nats.conf"
    config.write_text(f"max_payload: {MAX_PAYLOAD}\n")
    with EmbeddedNats(extra_args=("-c", str(config))) as server:
        yield server


def request(response_id: str, text: str) -> RequestAccepted:
    return RequestAccepted(response_id=response_id, seq=0, model="payload-model",
                           messages=(ChatMessage(role="user", content=text),))


async def test_an_oversized_request_is_refused_and_holds_nothing(small_nats: EmbeddedNats) -> None:
    journal = await connect(small_nats.url)
    try:
        assert journal.connection.nc.max_payload == MAX_PAYLOAD
        for index in range(50):
            with pytest.raises(PayloadTooLarge) as caught:
                await journal.publish_request(request(f"resp_big_{index}", "x" * MAX_PAYLOAD))
            assert caught.value.limit < MAX_PAYLOAD < caught.value.size
        assert journal.connection.js.publish_async_pending() == 0
        assert not await journal.response_exists("resp_big_0")
        await journal.publish_request(request("resp_small", "hi"))
        assert await journal.last_seq("resp_small") == 0
    finally:
        await journal.close()
