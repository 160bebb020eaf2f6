"""The projection: every response's event log folded into the store, by a durable
JetStream consumer that any number of API replicas (or `spate store`) share.

Each event is folded with the same fold the live stream uses and appended by
`(response_id, seq)`, so a redelivery, a replay or two projectors never double-write. A
projector keeps the fold of the responses it is projecting; when an event arrives that
does not follow on from its fold (another projector took the ones before, or it just
started), it rebuilds the fold from the store, and fills from the log whatever the store
lacks. Responses whose request said `store: false` are never written.

An event that fails for any reason but the store or the bus being away (an event the
store refuses, a bug) is tried MAX_TRIES times, then goes to the store's dead letters
with its error and is skipped, along with the rest of its response: it is never retried
forever, and a failing response never holds up the others.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict
from typing import Any

from events import RequestAccepted, ResponseFold, decode
from events.codec import EventDecodeError
from events.fold import TERMINAL_SSE_TYPES, TERMINAL_STATUSES
from journal import Delivery, DurableConsumer, Journal, JournalUnavailable
from store.background_slots import BackgroundSlots
from store.base import Store
from store.errors import SeqGap, StoreError, StoreUnavailable

log = logging.getLogger("spate.store.projector")

DURABLE_NAME = "spate-store"
# Folds and "not stored" verdicts kept in memory; older ones are rebuilt when needed.
CACHED_RESPONSES = 4096
# Events one fetch takes: each response's share of them is one store write.
FETCH_BATCH = 1024
# How long a fetch waits. A pull that finds nothing waiting lingers on the server, and
# once its first event comes the client goes on collecting until the batch is full or
# this time is up: a long wait (it was 1 s) held events back by up to that much at a
# moderate rate. Idle, it costs one pull request per wait.
FETCH_WAIT_S = 0.05
SNAPSHOT_EVERY = 16
SNAPSHOT_SSE_TYPES = frozenset({"response.output_item.added", "response.output_item.done"})
# How soon a batch the store could not take is delivered again.
HAND_BACK_DELAY_S = 1.0
# Tries an event gets (outages aside) before it goes to the dead letters.
MAX_TRIES = 3


class Projector:
    def __init__(
        self, journal: Journal, store: Store, slots: BackgroundSlots | None = None
    ) -> None:
        self._journal = journal
        self._store = store
        # Given back when a background response's end is stored (SPATE_KEY_MAX_BACKGROUND).
        self._slots = slots
        self._folds: OrderedDict[str, ResponseFold] = OrderedDict()
        self._unstored: OrderedDict[str, None] = OrderedDict()
        # Failed tries by (response id, seq), and responses given up on (dead letters).
        self._failures: OrderedDict[tuple[str, int], int] = OrderedDict()
        self._dead: OrderedDict[str, None] = OrderedDict()
        self._task: asyncio.Task[None] | None = None
        self._feed: DurableConsumer | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self.run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._feed is not None:
            await self._feed.close()

    async def run(self) -> None:
        # The step projecting the last fetch: the next fetch overlaps its store writes,
        # and the step after it starts only once it is done (a response's events stay
        # in order across fetches).
        step: asyncio.Task[None] | None = None
        try:
            while True:
                try:
                    await self._journal.wait_connected()
                    if self._feed is None:
                        self._feed = await self._journal.event_feed(DURABLE_NAME)
                    deliveries = await self._feed.fetch(FETCH_BATCH, timeout=FETCH_WAIT_S)
                    if step is not None:
                        previous, step = step, None
                        await previous
                    if deliveries:
                        step = asyncio.create_task(self._project_fetched(deliveries))
                except (StoreUnavailable, JournalUnavailable) as error:
                    # The batch was handed back and comes again: nothing is lost.
                    log.warning("projection paused: %s", error)
                    await asyncio.sleep(1.0)
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.exception("projection step failed")
                    await asyncio.sleep(1.0)
        finally:
            if step is not None:
                step.cancel()

    async def _project_fetched(self, deliveries: list[Delivery]) -> None:
        # Responses are independent: each one's events go in order, the responses of a
        # batch side by side, so their store round trips overlap.
        by_response: dict[str, list[Delivery]] = {}
        for delivery in deliveries:
            by_response.setdefault(_response_id(delivery), []).append(delivery)
        results = await asyncio.gather(
            *(self._project_all(batch) for batch in by_response.values()),
            return_exceptions=True,
        )
        outages = [result for result in results if isinstance(result, BaseException)]
        if outages:
            raise outages[0]

    async def _project_all(self, deliveries: list[Delivery]) -> None:
        """One response's deliveries in order, as one store write when they follow on
        from its fold (the usual case: a stream's events, in order). Anything else (a
        gap, an event that fails) takes them one by one: on a failure, that one and the
        rest are handed back and come again in a second, not after the consumer's ack
        wait. Only an outage is raised (it pauses the projection); other responses go on
        past any other failure."""
        if await self._project_batch(deliveries):
            return
        for index, delivery in enumerate(deliveries):
            try:
                await self._project(delivery)
            except (StoreUnavailable, JournalUnavailable):
                await _hand_back(deliveries[index:])
                raise
            except Exception:
                await _hand_back(deliveries[index:])
                return

    async def _project_batch(self, deliveries: list[Delivery]) -> bool:
        """Project and ack the deliveries in one append; False (nothing written) when
        they need the one-by-one path."""
        if len(deliveries) < 2:
            return False
        try:
            events = [decode(delivery.data) for delivery in deliveries]
        except EventDecodeError:
            return False
        try:
            if not await self._append_run(events):
                return False
        except (StoreUnavailable, JournalUnavailable):
            await _hand_back(deliveries)
            raise
        for delivery in deliveries:
            await delivery.ack_soon()
        return True

    async def apply_run(self, events: list[Any]) -> None:
        """Project consecutive events of one response (`spate store rebuild`): one store
        write when they follow on from its fold, else one by one (`apply`)."""
        if len(events) > 1 and await self._append_run(events):
            return
        for event in events:
            await self.apply(event)

    async def _append_run(self, events: list[Any]) -> bool:
        """Store consecutive events of one response in one append; False (nothing
        written) when they do not follow on from its fold or the append failed for
        another reason than an outage."""
        response_id = events[0].response_id
        fold = self._folds.get(response_id)
        if fold is None and events[0].seq == 0:
            fold = ResponseFold()  # a new response: the append says if it is not
        if (
            fold is None or response_id in self._dead or response_id in self._unstored
            or any(event.seq != fold.last_seq + 1 + index for index, event in enumerate(events))
        ):
            return False
        try:
            await self._append(fold, events)
        except (StoreUnavailable, JournalUnavailable):
            raise
        except Exception:  # SeqGap, a refused write: one by one, with their retries
            self._folds.pop(response_id, None)
            return False
        return True

    async def _project(self, delivery: Delivery) -> None:
        try:
            event = decode(delivery.data)
        except EventDecodeError as error:
            log.error("dropping an undecodable event: %s", error)
            await delivery.term()
            return
        if event.response_id not in self._dead:
            try:
                await self.apply(event)
            except (StoreUnavailable, JournalUnavailable):
                raise
            except Exception as error:
                if not await self._gave_up(event, error):
                    raise
        # Not awaited: a lost ack only redelivers an event the store already has.
        await delivery.ack_soon()

    async def _gave_up(self, event: Any, error: Exception) -> bool:
        """Count a failed try; at MAX_TRIES, write the dead letter and skip the response
        from here on (True)."""
        key = (event.response_id, event.seq)
        tries = self._failures.pop(key, 0) + 1
        if tries < MAX_TRIES:
            log.warning("projecting %s seq %d failed (try %d of %d): %s",
                        event.response_id, event.seq, tries, MAX_TRIES, error)
            self._failures[key] = tries
            while len(self._failures) > CACHED_RESPONSES:
                self._failures.popitem(last=False)
            return False
        log.error("projecting %s seq %d failed %d times; it goes to the dead letters: %s",
                  event.response_id, event.seq, tries, error, exc_info=error)
        await self._store.dead_letter(event.response_id, event.seq, f"{type(error).__name__}: {error}")
        self._folds.pop(event.response_id, None)
        self._dead[event.response_id] = None
        while len(self._dead) > CACHED_RESPONSES:
            self._dead.popitem(last=False)
        return True

    async def catch_up(self, response_id: str) -> bool:
        """Bring the store up to everything the log holds for the response now, itself
        rather than waiting for the shared consumer (read-your-writes for the replica
        that served it); True when the stored response has ended."""
        stored = await self._store.get_response(response_id)
        if stored is not None and stored.status in TERMINAL_STATUSES:
            return True
        for event in (await self._journal.read_log(response_id))[stored.next_seq if stored else 0:]:
            await self.apply(event)
        stored = await self._store.get_response(response_id)
        return stored is not None and stored.status in TERMINAL_STATUSES

    async def apply(self, event: Any) -> None:
        """Project one event (any order, any number of times)."""
        response_id = event.response_id
        if response_id in self._unstored:
            return
        fold = self._folds.get(response_id)
        if fold is None or fold.last_seq != event.seq - 1:
            fold = await self._catch_up(response_id, event.seq)
            if fold is None:
                return
        if event.seq <= fold.last_seq:
            return
        try:
            await self._append(fold, [event])
        except SeqGap:
            # The store is behind this fold (a write that failed, another projector):
            # refold from the log up to what the store has, fill the rest from the log,
            # and append once more.
            fold = await self._catch_up(response_id, event.seq)
            if fold is not None and event.seq > fold.last_seq:
                await self._append(fold, [event])

    async def _append(self, fold: ResponseFold, events: list[Any]) -> None:
        """Fold consecutive events (following on from `fold`) and store them in one write."""
        response_id = events[0].response_id
        first = events[0] if isinstance(events[0], RequestAccepted) else None
        if first is not None and not first.store:
            self._remember_unstored(response_id)
            return
        produced: list[dict[str, Any]] = []
        # The snapshot costs the whole Response: taken when the status or an item
        # changes, and every SNAPSHOT_EVERY events between, not for every token.
        snapshot = first is not None
        for event in events:
            status = fold.status
            fresh = fold.apply(event)
            produced.extend(fresh)
            snapshot = (
                snapshot or fold.status != status or fold.last_seq % SNAPSHOT_EVERY == 0
                or any(sse["type"] in SNAPSHOT_SSE_TYPES for sse in fresh)
            )
        try:
            applied = await self._store.append(
                response_id, events[0].seq, events=len(events), sse_events=produced,
                status=fold.status or "queued", response=fold.response() if snapshot else None,
                owner=first.owner if first is not None else None,
                input_items=first.input_items if first is not None else (),
            )
        except StoreError:
            # The fold has these events and the store may not: rebuilt next time.
            self._folds.pop(response_id, None)
            raise
        if not applied:  # another projector was first, or the response was deleted
            self._folds.pop(response_id, None)
            return
        self._remember(response_id, fold)
        if first is not None and first.new_input_items:
            await self._store.put_items(first.new_input_items, first.owner)
        if fold.done:
            self._folds.pop(response_id, None)
            if any(sse["type"] in TERMINAL_SSE_TYPES for sse in produced):
                await self._keep_output(fold)
                request = fold.request
                if self._slots is not None and request is not None and request.background:
                    await self._slots.give_back(request.owner, response_id)

    async def _catch_up(self, response_id: str, seq: int) -> ResponseFold | None:
        """The fold of the events before `seq`, or None when there is nothing to do. The
        store keeps no raw events: the fold is rebuilt from the log (JetStream), which
        holds every event of a response that is still being written."""
        next_seq = await self._store.next_seq(response_id)
        if seq < next_seq:
            return None  # applied already
        if seq == 0:
            return ResponseFold()
        log_events = await self._journal.read_log(response_id)
        if log_events and isinstance(log_events[0], RequestAccepted) and not log_events[0].store:
            self._remember_unstored(response_id)
            return None
        if len(log_events) < seq:
            log.warning("the log of %s holds %d events, not the %d before seq %d: left as "
                        "stored", response_id, len(log_events), seq, seq)
            return None
        fold = ResponseFold()
        for event in log_events[:next_seq]:
            fold.apply(event)
        # The store lacks the events from next_seq to seq - 1: stored as one write.
        if next_seq < seq:
            await self._append(fold, log_events[next_seq:seq])
        return fold if fold.last_seq == seq - 1 else None

    async def _keep_output(self, fold: ResponseFold) -> None:
        """A response in a conversation adds its input and output items to it."""
        request = fold.request
        if request is None:
            return
        output = fold.response()["output"]
        await self._store.put_items(output, request.owner)  # for item_reference inputs
        if request.conversation_id is not None:
            items = [*request.new_input_items, *output]
            await self._store.add_conversation_items(request.conversation_id, items)

    def _remember(self, response_id: str, fold: ResponseFold) -> None:
        self._folds[response_id] = fold
        self._folds.move_to_end(response_id)
        while len(self._folds) > CACHED_RESPONSES:
            self._folds.popitem(last=False)

    def _remember_unstored(self, response_id: str) -> None:
        self._unstored[response_id] = None
        while len(self._unstored) > CACHED_RESPONSES:
            self._unstored.popitem(last=False)


async def _hand_back(deliveries: list[Delivery]) -> None:
    for delivery in deliveries:
        with contextlib.suppress(Exception):  # NATS away too: the ack wait brings them back
            await delivery.nak(delay=HAND_BACK_DELAY_S)


def _response_id(delivery: Delivery) -> str:
    """The response an event belongs to, from its subject (no decoding needed)."""
    return delivery.subject.rsplit(".", 1)[-1]
