"""`Journal`: what a spate process holds to talk to NATS, one per process."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

from nats.aio.msg import Msg
from nats.aio.subscription import Subscription as NatsSubscription

from events import AnyEvent, Event, RequestAccepted
from events.subjects import (
    CANCELS_SUBJECT_PREFIX,
    EVENTS_STREAM,
    EVENTS_SUBJECT_PREFIX,
    REQUESTS_STREAM,
    direct_consumer_prefix,
    direct_subject,
    events_subject,
    request_subject,
    routed_worker,
    worker_client_name,
    worker_consumer,
)
from journal.backlog import Backlog, consumer_backlog
from journal.cache_reports import follow_cache_reports, publish_cache_report
from journal.connection import Connection
from journal.durable_consumer import DurableConsumer
from journal.errors import Fenced, JournalUnavailable, PayloadTooLarge, ResponseIdTaken
from journal.follower import REPAIRS_AT_ONCE, LogFollower
from journal.lease import take_lease
from journal.live_feed import LiveFeed
from journal.log_reader import cancel_requested, last_seq, read_log
from journal.pipeline import PublishPipeline
from journal.rate_limits import RateLimitStates
from journal.registry import Registry
from journal.replay import ReplayedMessage, replay
from journal.routing import (
    CacheReport,
    direct_consumer_config,
    fall_back,
    first_lease,
    lease_holder,
)
from journal.settings import JournalSettings
from journal.tail import TailedMessage, tail
from journal.token_counts import CountHandler, request_count, serve_counts
from journal.topology import projection_consumer_config, request_consumer_config
from journal.writer import (
    CancelReason,
    ResponseWriter,
    publish_cancel,
    publish_event,
    publish_request,
)

log = logging.getLogger("spate.journal")


class Journal:
    def __init__(
        self, settings: JournalSettings, name: str, report_retries: bool = True,
        route: Callable[[RequestAccepted], str | None] | None = None,
        route_deadline_s: float = 2.0,
    ) -> None:
        self.settings = settings
        self.connection = Connection(settings, name, report_retries)
        self.registry = Registry(self.connection)
        # The budgets of API keys and key groups, shared by every API replica.
        self.rate_limits = RateLimitStates(self.connection)
        self._pipeline = PublishPipeline(self.connection)
        # Cancels sent from places that cannot await (a stream torn down by a
        # disconnect); referenced here until they finish.
        self._pending: set[asyncio.Task[object]] = set()
        # Shared by every follower of this process, so repairs cannot storm NATS.
        self._repairs = asyncio.Semaphore(REPAIRS_AT_ONCE)
        # The one live subscription every follower of this process reads from.
        self.live_feed = LiveFeed(self.connection)
        # Picks the worker a request goes to (api/cache_router.py), or None for the shared queue;
        # a routed request not taken within `route_deadline_s` goes there (journal/routing.py).
        self._route = route
        self._route_deadline_s = route_deadline_s

    # -- lifecycle ---------------------------------------------------------------------

    def start(self) -> None:
        """Connect in the background: callers serve (with errors) while NATS is away."""
        self.connection.start()

    async def wait_connected(
        self, stop: asyncio.Event | None = None, timeout: float | None = None
    ) -> bool:
        return await self.connection.wait_connected(stop, timeout)

    @property
    def connected(self) -> bool:
        return self.connection.connected

    async def close(self) -> None:
        for task in list(self._pending):
            with contextlib.suppress(Exception):
                await asyncio.wait_for(task, self.settings.nats_timeout_s)
        await self.connection.close()

    # -- a response's log ----------------------------------------------------------------

    async def publish_request(
        self, event: RequestAccepted, traceparent: str | None = None, claim: bool = False
    ) -> None:
        """Raises PayloadTooLarge for a request the server cannot take in one message,
        ResponseIdTaken when `claim` finds its log already begun (writer.publish_request),
        JournalUnavailable when NATS does not take it."""
        js = self.connection.require()
        worker = self._route(event) if self._route is not None else None
        subject = direct_subject(event.model, worker) if worker is not None else None
        try:
            await publish_request(js, event, self.settings.nats_timeout_s,
                                  self.connection.client().max_payload, traceparent, claim, subject)
        except (PayloadTooLarge, ResponseIdTaken):
            raise
        except Exception as error:
            raise JournalUnavailable(f"Could not publish the request: {error}") from error
        if worker is not None:
            self._keep(fall_back(js, event, self.connection.name, self._route_deadline_s,
                                 self.settings.nats_timeout_s, traceparent))

    def _keep(self, coroutine: Coroutine[Any, Any, object]) -> None:
        task = asyncio.create_task(coroutine)
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def take_delivery_lease(self, response_id: str, subject: str) -> int | None:
        """`take_lease` for a delivery from `subject`. From a worker's own subject (read by
        that worker, or by one that adopted it when it stopped), only when the response's
        first lease is (or becomes) the taker's or that worker's: None when the API handed
        it to the shared queue (journal/routing.py)."""
        js = self.connection.require()
        routed_to = routed_worker(subject)
        if routed_to is not None:
            holder = await lease_holder(js, EVENTS_STREAM, response_id)
            if holder is None:
                return await first_lease(js, response_id, self.connection.name)
            if holder not in (self.connection.name, worker_client_name(routed_to)):
                return None
        return await take_lease(js, response_id, self.connection.name)

    async def write(self, event: Event, take_over: bool = False) -> None:
        """Append one event to its response's log (deduplicated by its seq); with
        `take_over`, first take the log's lease, so a worker that still thinks it holds
        the response can write nothing after it."""
        js = self.connection.require()
        try:
            lease_seq = None
            if take_over and self.connection.fences_writes:
                lease_seq = await take_lease(js, event.response_id, self.connection.name)
            await publish_event(js, event, lease_seq)
        except Fenced:
            raise
        except Exception as error:
            raise JournalUnavailable(f"Could not write to the event log: {error}") from error

    async def follow(self, response_id: str) -> LogFollower:
        """Start receiving the response's events; call before publishing its request."""
        follower = LogFollower(self.connection, self.live_feed, response_id, self._repairs)
        await follower.start()
        return follower

    async def take_lease(self, response_id: str) -> int:
        """Become the one writer of `response_id`'s log: whoever held it before is fenced
        out. Take it before reading the log to continue it, so nothing lands after the read."""
        return await take_lease(self.connection.require(), response_id, self.connection.name)

    def writer(
        self, response_id: str, next_seq: int, lease_seq: int,
        on_fenced: Callable[[], None] | None = None,
    ) -> ResponseWriter:
        """The writer of a log whose lease `lease_seq` this process took (unfenced on a
        server too old to check it)."""
        fenced_by = lease_seq if self.connection.fences_writes else None
        return ResponseWriter(
            self.connection.require(), self._pipeline, response_id, next_seq, fenced_by,
            holder=self.connection.name, retry_for_s=self.settings.nats_outage_s,
            ack_timeout_s=self.settings.nats_timeout_s, on_fenced=on_fenced,
        )

    async def last_seq(self, response_id: str) -> int:
        return await last_seq(self.connection.require(), response_id)

    async def response_exists(self, response_id: str) -> bool:
        return await self.last_seq(response_id) >= 0

    async def read_log(self, response_id: str) -> list[AnyEvent]:
        return await read_log(self.connection.require(), response_id)

    # -- cancels -------------------------------------------------------------------------

    async def cancel(self, response_id: str, reason: CancelReason) -> None:
        js = self.connection.require()
        try:
            await publish_cancel(js, response_id, reason)
        except Exception as error:
            raise JournalUnavailable(f"Could not publish the cancel: {error}") from error

    def cancel_soon(self, response_id: str, reason: CancelReason) -> None:
        async def publish() -> None:
            try:
                await self.cancel(response_id, reason)
            except Exception as error:  # the worker still stops at max_output_tokens
                log.warning("could not publish the cancel of %s: %s", response_id, error)

        self._keep(publish())

    async def cancel_requested(self, response_id: str) -> bool:
        return await cancel_requested(self.connection.require(), response_id)

    async def subscribe_cancels(self, on_cancel: Callable[[str], None]) -> Subscription:
        """Call `on_cancel(response_id)` for every cancel written from now on."""

        async def on_message(msg: Msg) -> None:
            on_cancel(msg.subject.rsplit(".", 1)[-1])

        subscription = await self.connection.require_client().subscribe(
            f"{CANCELS_SUBJECT_PREFIX}.>", cb=on_message
        )
        return Subscription(subscription)

    # -- cache reports -------------------------------------------------------------------

    async def publish_cache_report(self, report: CacheReport) -> None:
        """Tell the API's routers what a worker holds and how busy it is (never stored)."""
        nc = self.connection.client()
        try:
            await publish_cache_report(nc, report)
        except Exception as error:
            raise JournalUnavailable(f"Could not publish a cache report: {error}") from error

    async def follow_cache_reports(self, on_report: Callable[[CacheReport], None]) -> Subscription:
        """Call `on_report` with every worker's cache reports from now on."""
        return Subscription(await follow_cache_reports(self.connection.require_client(), on_report))

    # -- input token counts --------------------------------------------------------------

    async def count_input_tokens(self, event: RequestAccepted) -> int:
        """How many input tokens `event` would have, counted by a worker of its model;
        raises `CountRefused` when none can."""
        return await request_count(self.connection.require_client(), event)

    async def serve_counts(self, model: str, handler: CountHandler) -> Subscription:
        """Answer `model`'s count requests with `handler(request)`, as one of its workers."""
        return Subscription(await serve_counts(self.connection.require_client(), model, handler))

    # -- durable consumers ---------------------------------------------------------------

    async def request_queue(
        self, model: str, ack_wait_s: float, max_deliver: int
    ) -> DurableConsumer:
        """The queue of `model`'s requests that all of its workers share."""
        config = request_consumer_config(model, ack_wait_s, max_deliver)
        queue = DurableConsumer(self.connection, REQUESTS_STREAM, config)
        await queue.open()
        return queue

    async def direct_queue(
        self, model: str, worker_id: str, ack_wait_s: float, max_deliver: int
    ) -> DurableConsumer:
        """The requests routed to `worker_id` alone (journal/routing.py)."""
        config = direct_consumer_config(model, worker_id, ack_wait_s, max_deliver)
        queue = DurableConsumer(self.connection, REQUESTS_STREAM, config)
        await queue.open()
        return queue

    async def orphaned_routes(self, model: str, live: set[str]) -> list[str]:
        """The workers (as subject tokens) not in `live` whose own request subject still
        holds requests of `model`, waiting or delivered and unacknowledged: a worker that
        stopped leaves them there, and only a worker that adopts its consumer runs them."""
        js = self.connection.require()
        prefix = direct_consumer_prefix(model)
        orphans = []
        offset = 0
        while True:  # the server lists 256 consumers at a time
            try:
                page = await js.consumers_info(REQUESTS_STREAM, offset)
            except Exception as error:
                raise JournalUnavailable(f"Could not list the request consumers: {error}") from error
            for info in page:
                token = info.name[len(prefix):] if info.name.startswith(prefix) else ""
                if not token or info.config.filter_subject != direct_subject(model, token):
                    continue  # another model's consumer, whose name only begins alike
                held = (info.num_pending or 0) + (info.num_ack_pending or 0)
                if token not in live and held:
                    orphans.append(token)
            offset += len(page)
            if len(page) < 256:
                return orphans

    async def event_feed(
        self, durable_name: str, ack_wait_s: float = 30.0, stream: str = EVENTS_STREAM
    ) -> DurableConsumer:
        """Every response's events in `stream` (a partition of the log), in stream order,
        shared by the projectors that use `durable_name`: each event goes to one of them
        until one acks it."""
        config = projection_consumer_config(durable_name, ack_wait_s)
        feed = DurableConsumer(self.connection, stream, config)
        await feed.open()
        return feed

    # -- observing -----------------------------------------------------------------------

    async def rtt(self) -> float:
        """Seconds of one round trip to the NATS server (a PING answered by a PONG)."""
        nc = self.connection.require_client()
        try:
            return float(await asyncio.wait_for(nc.rtt(), self.settings.nats_timeout_s))
        except Exception as error:
            raise JournalUnavailable(f"NATS did not answer a ping: {error}") from error

    async def request_backlog(self, model: str) -> Backlog | None:
        """Requests of `model` waiting for a worker and running unacknowledged."""
        return await consumer_backlog(
            self.connection.require(), REQUESTS_STREAM, worker_consumer(model)
        )

    async def feed_backlog(self, durable_name: str) -> Backlog | None:
        """Events an `event_feed(durable_name)` has not applied yet."""
        return await consumer_backlog(self.connection.require(), EVENTS_STREAM, durable_name)

    def tail_events(self, from_start: bool = False) -> AsyncIterator[TailedMessage]:
        """Every response's events as they are written (or from the oldest stored)."""
        return tail(self.connection.require(), EVENTS_STREAM, f"{EVENTS_SUBJECT_PREFIX}.>", from_start)

    def replay_events(self) -> AsyncIterator[ReplayedMessage]:
        """Every response's stored events, oldest first, up to the last one stored now:
        a projection rebuilt from the log (`spate store rebuild`)."""
        return replay(self.connection.require(), EVENTS_STREAM, f"{EVENTS_SUBJECT_PREFIX}.>")

    def tail_requests(self, model: str, from_start: bool = False) -> AsyncIterator[TailedMessage]:
        """`model`'s request events as the API publishes them."""
        return tail(self.connection.require(), REQUESTS_STREAM, request_subject(model), from_start)

    def tail_response(self, response_id: str) -> AsyncIterator[TailedMessage]:
        """One response's log from seq 0, then its events as they are written."""
        return tail(self.connection.require(), EVENTS_STREAM, events_subject(response_id), True)


class Subscription:
    """A live subscription its owner can close."""

    def __init__(self, subscription: NatsSubscription) -> None:
        self._subscription = subscription

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await self._subscription.unsubscribe()
