"""Adopting a stopped worker's routed requests.

A request routed to a worker's cache goes to that worker's own subject
(journal/routing.py), which only its own durable consumer reads. When the worker stops,
whatever waits there, or was delivered to it and never acknowledged, would wait for it
forever: the shared queue's redelivery does not reach it. So every worker looks, now and
then, for such consumers whose worker's heartbeat has expired and still hold requests, and
reads them as its own until they have been quiet for an ack wait. A request it then takes
is resumed from its log like any redelivery; the leases decide between adopters, and the
API's hand-off to the shared queue at its routing deadline still wins over all of them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from events.subjects import subject_token
from journal import DurableConsumer, Journal

log = logging.getLogger("spate.worker.adoption")

# A consume loop that returns after `idle_s` seconds with no delivery.
Consume = Callable[[DurableConsumer, asyncio.Event, float], Awaitable[None]]


async def adopt_orphans(
    journal: Journal, model: str, worker_id: str, ack_wait_s: float, max_deliver: int,
    every_s: float, consume: Consume, stop: asyncio.Event,
) -> None:
    own = subject_token(worker_id)
    while not stop.is_set():
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(stop.wait(), every_s)
        if stop.is_set():
            return
        try:
            live = await journal.registry.live_workers(model) | {own}
            orphans = await journal.orphaned_routes(model, live)
        except Exception as error:  # NATS away: look again later
            log.debug("could not look for stopped workers' requests: %s", error)
            continue
        for token in orphans:
            log.info("adopting the requests routed to stopped worker %s", token)
            try:
                queue = await journal.direct_queue(model, token, ack_wait_s, max_deliver)
            except Exception as error:
                log.warning("could not adopt worker %s's requests: %s", token, error)
                continue
            try:
                # Quiet for an ack wait and a bit: what it held unacknowledged came back.
                await consume(queue, stop, ack_wait_s + every_s)
            finally:
                await queue.close()
