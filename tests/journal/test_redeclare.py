"""A NATS server that restarts empty gets its streams, buckets and the workers' consumer
back from the processes still connected to it."""

from __future__ import annotations

import asyncio

from cli.nats_server import EmbeddedNats
from events import ModelCard, decode
from tests.journal.conftest import connect
from tests.journal.test_log_reader import request

MODEL = "redeclare-model"


async def test_streams_and_consumers_come_back_after_an_empty_restart() -> None:
    server = EmbeddedNats().start()
    try:
        journal = await connect(server.url)
        queue = await journal.request_queue(MODEL, ack_wait_s=30, max_deliver=3)
        server.stop()  # its data folder goes with it: it comes back empty
        server = EmbeddedNats(port=server.port).start()
        for _ in range(100):  # the client reconnects by itself, then re-declares
            try:
                await journal.publish_request(request("resp_after_restart", MODEL))
                break
            except Exception:
                await asyncio.sleep(0.1)
        deliveries = []
        for _ in range(30):
            deliveries = await queue.fetch(batch=1, timeout=0.3)
            if deliveries:
                break
        assert [decode(d.data).response_id for d in deliveries] == ["resp_after_restart"]
        await journal.registry.advertise(ModelCard(name=MODEL, context_length=8))
        assert (await journal.registry.card(MODEL)) is not None
        await queue.close()
        await journal.close()
    finally:
        server.stop()
