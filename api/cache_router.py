"""Routing that follows the cache: a request goes to the worker that already holds the
longest prefix of its prompt, unless that worker is much busier than the others.

The index is built from the cache reports workers publish (workers/cache_events.py):
prefix digest -> the worker that cached it last, kept for the newest `MAX_DIGESTS`. A
worker whose reports stop for `stale_s` is treated as gone. The choice is only a hint:
the request goes to the worker's own subject and reaches the shared queue anyway when
it is not taken by `route_deadline_s` (journal/routing.py).

A request of a turn a client named (`x-codex-turn-state`, api/lowering/turn_state.py)
goes where the turn runs instead: the worker the turn's token names while it is alive,
else the live worker the turn's key picks by rendezvous hashing, which every API
replica computes alike from the same cache reports.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import TypeVar

from events import RequestAccepted
from journal import Journal
from journal.routing import CacheReport, cache_key_digest, prefix_chain

log = logging.getLogger("spate.api.router")

V = TypeVar("V")

MAX_DIGESTS = 200_000
# Turns asked for and choices made, per response id, kept until their create reads them
# (one create at a time reads its own; the bound only drops what a failed create left).
MAX_PENDING = 10_000
# What the router guesses a held prefix saves without tokenizing it: its messages' JSON at
# about four characters a token.
CHARS_PER_TOKEN = 4


@dataclass(slots=True)
class WorkerLoad:
    in_flight: int
    seen_at: float
    # Routed here since its last report (the report does not count them yet).
    routed: int = 0

    @property
    def load(self) -> int:
        return self.in_flight + self.routed


class CacheRouter:
    def __init__(self, max_skew: int, stale_s: float, tokens_per_skew: int = 256) -> None:
        self._max_skew = max_skew
        self._stale_s = stale_s
        self._tokens_per_skew = tokens_per_skew
        self._holders: dict[str, OrderedDict[str, str]] = {}
        self._loads: dict[str, dict[str, WorkerLoad]] = {}
        self.routed = 0
        self.unrouted = 0
        self.turns_followed = 0
        self._turns: OrderedDict[str, tuple[str, str | None]] = OrderedDict()
        self._chosen: OrderedDict[str, str] = OrderedDict()

    async def start(self, journal: Journal) -> None:
        """Listen to every model's cache reports (once NATS is reached: the API serves
        before it is); `journal` was built to route its requests with `choose`."""
        if not await journal.wait_connected():
            return
        await journal.follow_cache_reports(self.observe)

    def observe(self, report: CacheReport) -> None:
        loads = self._loads.setdefault(report.model, {})
        if report.worker_id not in loads:
            log.info("worker %s serves %s", report.worker_id, report.model)
        loads[report.worker_id] = WorkerLoad(report.in_flight, time.monotonic())
        holders = self._holders.setdefault(report.model, OrderedDict())
        for digest in report.digests:
            holders[digest] = report.worker_id
            holders.move_to_end(digest)
        while len(holders) > MAX_DIGESTS:
            holders.popitem(last=False)

    def follow_turn(self, response_id: str, turn: str, worker: str | None) -> None:
        """Send the request `response_id` where the turn `turn` runs: `worker` while it
        is alive, else the live worker the turn's key picks."""
        _bounded_put(self._turns, response_id, (turn, worker))

    def chosen_for(self, response_id: str) -> str | None:
        """The worker `response_id` was sent to, if one was chosen (read once)."""
        return self._chosen.pop(response_id, None)

    def choose(self, event: RequestAccepted) -> str | None:
        """The worker `event` goes to; None for the shared queue."""
        turn = self._turns.pop(event.response_id, None)
        worker = self._turn_worker(event.model, *turn) if turn is not None else None
        if worker is not None:
            self.turns_followed += 1
        else:
            worker = self._holder(event)
        if worker is None:
            self.unrouted += 1
            return None
        self.routed += 1
        self._loads[event.model][worker].routed += 1
        _bounded_put(self._chosen, event.response_id, worker)
        return worker

    def _turn_worker(self, model: str, turn: str, named: str | None) -> str | None:
        live = self._live(model)
        if len(live) < 2:
            return None  # with one worker the shared queue reaches it all the same
        if named in live:
            log.debug("turn %s: to %s, which it runs on", turn, named)
            return named
        # Rendezvous hashing: the same pick on every replica, and a turn moves only when
        # its worker goes.
        picked = max(live, key=lambda name: hashlib.sha256(f"{turn}/{name}".encode()).digest())
        log.debug("turn %s: to %s, its pick among the live workers", turn, picked)
        return picked

    def _holder(self, event: RequestAccepted) -> str | None:
        holders = self._holders.get(event.model)
        live = self._live(event.model)
        if not holders or len(live) < 2:
            return None  # with one worker the shared queue reaches it all the same
        chain = prefix_chain(event)
        key = cache_key_digest(event)
        # The cache key first (the client names the prefix: the turns before this one),
        # then the longest prefix; each with the characters it stands for.
        before_last = chain[-2][1] if len(chain) > 1 else 0
        ordered = ([(key, before_last)] if key is not None else []) + chain[::-1]
        for digest, held_chars in ordered:
            worker = holders.get(digest)
            if worker is None or worker not in live:
                continue
            others = min(load.load for name, load in live.items() if name != worker)
            # A longer held prefix is worth more waiting: elsewhere it is prefilled again.
            held_tokens = held_chars // CHARS_PER_TOKEN
            allowed = self._max_skew + held_tokens // self._tokens_per_skew
            if live[worker].load - others >= allowed:
                log.debug("%s: holder %s is busy (%d against %d, %d allowed): the shared queue",
                          event.response_id, worker, live[worker].load, others, allowed)
                return None  # a busy holder does not get everything
            log.debug("%s: to %s, which holds its prefix", event.response_id, worker)
            return worker
        log.debug("%s: no live worker holds a prefix of it", event.response_id)
        return None

    def _live(self, model: str) -> dict[str, WorkerLoad]:
        now = time.monotonic()
        return {name: load for name, load in self._loads.get(model, {}).items()
                if now - load.seen_at < self._stale_s}


def _bounded_put(entries: OrderedDict[str, V], key: str, value: V) -> None:
    entries[key] = value
    while len(entries) > MAX_PENDING:
        entries.popitem(last=False)
