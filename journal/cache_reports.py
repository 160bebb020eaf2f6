"""Cache reports on core NATS: what a worker tells the API's routers about the prompt
prefixes it holds and how busy it is (`CacheReport`, journal/routing.py).

They go on `spate.cache.<model>.<worker>` and are never stored: a router that missed some
rebuilds its index from the next ones (api/cache_router.py).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from events.subjects import CACHE_SUBJECT_PREFIX, cache_subject
from journal.routing import CacheReport

log = logging.getLogger("spate.journal.cache_reports")


async def publish_cache_report(nc: Client, report: CacheReport) -> None:
    await nc.publish(cache_subject(report.model, report.worker_id), report.encode())


async def follow_cache_reports(
    nc: Client, on_report: Callable[[CacheReport], None]
) -> Subscription:
    """Call `on_report` with every model's cache reports from now on; a malformed one is
    dropped (routing only loses a hint)."""

    async def on_message(msg: Msg) -> None:
        try:
            report = CacheReport.decode(msg.data)
        except (ValueError, KeyError, TypeError) as error:
            log.debug("dropping a malformed cache report: %s", error)
            return
        on_report(report)

    return await nc.subscribe(f"{CACHE_SUBJECT_PREFIX}.>", cb=on_message)
