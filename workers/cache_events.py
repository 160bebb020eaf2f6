"""What a worker tells the API's routers: the prompt prefixes it holds and how busy it is.

Published through the journal (journal/cache_reports.py): after each
response it finishes, the digests of that prompt's prefixes (its prefix cache now holds
them); on every heartbeat, its load alone, which is also how a router learns it is alive.
A router that missed some rebuilds its index from the next ones, so nothing is stored.
"""

from __future__ import annotations

import logging

from events import RequestAccepted
from journal import Journal, JournalUnavailable
from journal.routing import CacheReport, prefix_digests

log = logging.getLogger("spate.worker.cache_events")


class CacheEvents:
    def __init__(self, journal: Journal, model: str, worker_id: str) -> None:
        self._journal = journal
        self._model = model
        self._worker_id = worker_id

    async def cached(self, request: RequestAccepted, in_flight: int) -> None:
        await self._send(in_flight, prefix_digests(request))

    async def load(self, in_flight: int) -> None:
        await self._send(in_flight, [])

    async def _send(self, in_flight: int, digests: list[str]) -> None:
        report = CacheReport(self._model, self._worker_id, in_flight, digests)
        try:
            await self._journal.publish_cache_report(report)
        except JournalUnavailable as error:  # routing only loses a hint
            log.debug("could not publish a cache report: %s", error)
