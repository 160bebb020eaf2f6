"""A response's writer through a NATS restart: what the outage swallowed is sent again
while the response goes on."""

from __future__ import annotations

import asyncio
from pathlib import Path

from cli.nats_server import EmbeddedNats
from events import GenerationStarted, TokensGenerated
from tests.journal.conftest import connect
from tests.journal.test_log_reader import request


async def test_an_event_lost_in_an_outage_is_resent_while_the_response_goes_on(tmp_path: Path) -> None:
    """An event published while NATS restarts (its data kept) can vanish with the old
    socket or meet a stream not loaded yet; readers wait on the gap, so the writer sends it
    again with its next event once NATS is back, not only when the response ends."""
    server = EmbeddedNats(store_dir=str(tmp_path)).start()
    try:
        journal = await connect(server.url, nats_outage_s=30, nats_timeout_s=0.5)
        rid = "resp_outage_gap"
        await journal.publish_request(request(rid))
        writer = journal.writer(rid, 1, await journal.take_lease(rid))
        await writer.publish(GenerationStarted, worker_id="w", input_tokens=1)
        await writer.flush()
        server.stop()
        await writer.publish(TokensGenerated, token_ids=(1,), text="a", channel="text")
        server = EmbeddedNats(port=server.port, store_dir=str(tmp_path)).start()
        for _ in range(400):  # a bounded wait: the reconnect is slower on a busy machine
            if journal.connection.connected:
                break
            await asyncio.sleep(0.05)
        # The scenario, not a wait for something: the ack wait (0.5 s) of the event sent
        # into the outage runs out before the response's next event.
        await asyncio.sleep(0.6)
        await writer.publish(TokensGenerated, token_ids=(2,), text="b", channel="text")
        seqs: list[int] = []
        for _ in range(200):  # no flush: the log fills while the response goes on
            seqs = [event.seq for event in await journal.read_log(rid)]
            if seqs == [0, 1, 2, 3]:
                break
            await asyncio.sleep(0.05)
        assert seqs == [0, 1, 2, 3]
        await writer.flush()
        await journal.close()
    finally:
        server.stop()
