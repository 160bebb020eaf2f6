"""The workers' request queue, against a real nats-server: one delivery per request, a
redelivery after a nak, and acked requests gone for good."""

from __future__ import annotations

from events import decode
from journal import Journal
from tests.journal.test_log_reader import request

MODEL = "queue-model"


async def test_requests_are_delivered_redelivered_and_acked(journal: Journal) -> None:
    queue = await journal.request_queue(MODEL, ack_wait_s=30, max_deliver=3)
    try:
        await journal.publish_request(request("resp_queue_1", MODEL))
        await journal.publish_request(request("resp_queue_1", MODEL))  # deduplicated
        await journal.publish_request(request("resp_queue_2", MODEL))
        first = await queue.fetch(batch=10, timeout=2)
        assert [decode(d.data).response_id for d in first] == ["resp_queue_1", "resp_queue_2"]
        assert [d.num_delivered for d in first] == [1, 1]
        await first[0].ack()
        await first[1].nak()
        again = await queue.fetch(batch=10, timeout=2)
        assert [decode(d.data).response_id for d in again] == ["resp_queue_2"]
        assert again[0].num_delivered == 2
        await again[0].ack()
        assert await queue.fetch(batch=10, timeout=0.3) == []
    finally:
        await queue.close()
