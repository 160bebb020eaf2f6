"""`spate store`: the projection as a process of its own, between a real nats-server and
a real redis-server."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from cli.nats_server import EmbeddedNats
from cli.redis_server import EmbeddedRedis
from events import ChatMessage, GenerationFinished, RequestAccepted, Usage
from journal import Journal, JournalSettings
from store.redis_store import RedisStore
from tests.processes import SpateProcess


@pytest.fixture
def redis_server() -> Iterator[EmbeddedRedis]:
    with EmbeddedRedis() as server:
        yield server


async def test_the_store_command_projects_the_log(
    nats_server: EmbeddedNats, redis_server: EmbeddedRedis
) -> None:
    projector = SpateProcess(["store"], {"SPATE_NATS_URL": nats_server.url,
                                         "SPATE_STORE_URL": redis_server.url}, "store-command")
    journal = Journal(JournalSettings(nats_url=nats_server.url), name="spate-test")
    journal.start()
    store = RedisStore(redis_server.url)
    try:
        assert await journal.wait_connected()
        stored = RequestAccepted(response_id="resp_store_cmd", seq=0, model="m", store=True,
                                 messages=(ChatMessage(role="user", content="hi"),))
        unstored = stored.model_copy(update={"response_id": "resp_unstored", "store": False})
        for request in (stored, unstored):
            await journal.publish_request(request)
            writer = journal.writer(request.response_id, 1, await journal.take_lease(request.response_id))
            await writer.publish(GenerationFinished, finish_reason="stop",
                                 usage=Usage(input_tokens=1, output_tokens=0))
            await writer.flush()
        for _ in range(200):
            found = await store.get_response("resp_store_cmd")
            if found is not None and found.status == "completed":
                break
            assert projector.alive(), projector.output()
            await asyncio.sleep(0.1)
        assert found is not None and found.status == "completed", projector.output()[-2000:]
        assert await store.get_response("resp_unstored") is None
    finally:
        projector.stop()
        await store.close()
        await journal.close()
