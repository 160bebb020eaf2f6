"""The projection feed: every response's events, each until one projector acks it."""

from __future__ import annotations

import time

from events import GenerationStarted, decode
from journal import Journal
from tests.journal.test_log_reader import request


async def test_the_feed_carries_every_response_and_redelivers_the_unacked(journal: Journal) -> None:
    feed = await journal.event_feed("spate-test-feed")
    try:
        for rid in ("resp_feed_a", "resp_feed_b"):
            await journal.publish_request(request(rid))
            writer = journal.writer(rid, 1, await journal.take_lease(rid))
            await writer.publish(GenerationStarted, worker_id="w", input_tokens=1)
            await writer.flush()
        seen = []
        # The feed starts at the stream's first event, and the session's server holds every
        # earlier test's responses: read until these turn up, within a bound.
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            deliveries = await feed.fetch(batch=100, timeout=0.5)
            for delivery in deliveries:
                event = decode(delivery.data)
                if event.response_id.startswith("resp_feed_"):
                    seen.append((event.response_id, event.seq))
                    if event.seq == 1 and event.response_id == "resp_feed_b" and delivery.num_delivered == 1:
                        await delivery.nak()  # a projector that could not apply it yet
                        continue
                await delivery.ack()
            if ("resp_feed_b", 1) in seen[4:]:
                break
        assert seen[:4] == [("resp_feed_a", 0), ("resp_feed_a", 1), ("resp_feed_b", 0), ("resp_feed_b", 1)]
        assert seen[4:] == [("resp_feed_b", 1)]
    finally:
        await feed.close()
