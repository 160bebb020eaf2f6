"""Refilling the store from the log (`spate store rebuild`): every response the events
stream still holds is folded into the store exactly as the projection folds it.

The log is read once, oldest first, up to what it held when the rebuild began (later
events are the live projection's, which runs alongside: both write by `(response_id,
seq)`, so neither doubles nor loses an event). Events come in runs per response, and
each run is one append, the responses of a chunk side by side.

What the log cannot give back is left out and counted: a response whose first events
have aged out of the stream (its fold needs seq 0) unless the store already holds it up
to there, and every `store: false` response. Conversations, cancel marks and
background slots are the API's own writes, not the log's: a rebuild does not restore them.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any

from events import RequestAccepted, decode
from events.codec import EventDecodeError
from journal import Journal, JournalUnavailable
from store.base import Store
from store.errors import StoreUnavailable
from store.projector import Projector

log = logging.getLogger("spate.store.rebuild")

# Events read before they are projected: each response's share of them is one append.
CHUNK_EVENTS = 2048


@dataclass
class RebuildReport:
    # Events read from the log.
    events: int = 0
    # Responses projected (written now, or found in the store already).
    responses: int = 0
    # Responses whose request said `store: false`.
    unstored: int = 0
    # Responses whose first events the log no longer holds (and the store did not have).
    aged_out: int = 0
    # Responses sent to the dead letters (an event the store refused, a bug).
    failed: int = 0
    # Events that this code cannot decode (a newer version's).
    undecodable: int = 0
    seconds: float = 0.0

    @property
    def responses_per_s(self) -> float:
        return self.responses / self.seconds if self.seconds > 0 else 0.0


class Rebuild:
    def __init__(self, journal: Journal, store: Store) -> None:
        self._store = store
        self._journal = journal
        self._projector = Projector(journal, store)
        self.report = RebuildReport()
        # Responses met so far, and those of them left out.
        self._seen: set[str] = set()
        self._skipped: set[str] = set()

    async def run(self) -> RebuildReport:
        """Read the log and project it. StoreUnavailable or JournalUnavailable when either
        goes away: what was projected stays, and running it again is safe."""
        started = time.monotonic()
        chunk: list[Any] = []
        async for message in self._journal.replay_events():
            self.report.events += 1
            try:
                chunk.append(decode(message.data))
            except EventDecodeError as error:
                self.report.undecodable += 1
                log.error("skipping an event this version cannot read (%s): %s",
                          message.subject, error)
                continue
            if len(chunk) >= CHUNK_EVENTS:
                await self._project(chunk)
                chunk = []
        if chunk:
            await self._project(chunk)
        self.report.seconds = time.monotonic() - started
        return self.report

    async def _project(self, chunk: list[Any]) -> None:
        runs: dict[str, list[Any]] = {}
        for event in chunk:
            runs.setdefault(event.response_id, []).append(event)
        wanted = [run for run in runs.values() if await self._wanted(run[0])]
        results = await asyncio.gather(
            *(self._projector.apply_run(run) for run in wanted), return_exceptions=True
        )
        for run, result in zip(wanted, results, strict=True):
            if isinstance(result, (StoreUnavailable, JournalUnavailable)):
                raise result
            if isinstance(result, BaseException):
                response_id = run[0].response_id
                log.error("rebuilding %s failed; it goes to the dead letters: %s",
                          response_id, result)
                await self._store.dead_letter(response_id, run[0].seq,
                                              f"{type(result).__name__}: {result}")
                self._skipped.add(response_id)
                self.report.failed += 1

    async def _wanted(self, first: Any) -> bool:
        """Whether the response of `first` (its first event in this chunk) is projected."""
        response_id = first.response_id
        if response_id in self._skipped:
            return False
        if response_id in self._seen:
            return True
        self._seen.add(response_id)
        if isinstance(first, RequestAccepted) and first.seq == 0 and not first.store:
            self.report.unstored += 1
        elif first.seq > 0 and await self._store.next_seq(response_id) < first.seq:
            # Its beginning aged out of the log: the fold cannot be rebuilt.
            self.report.aged_out += 1
        else:
            self.report.responses += 1
            return True
        self._skipped.add(response_id)
        return False
