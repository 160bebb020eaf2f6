"""The API's Prometheus metrics: one registry per app, served at GET /metrics.

Counters and histograms move as requests are answered; everything read from elsewhere
(responses in flight, the NATS round trip, queue depths, the store's lag) is read when
scraped, so serving costs nothing between scrapes. A response's latencies are observed
once, when it ends: nothing here runs per token.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from api.guards.admission import Admission
from journal import Journal, JournalUnavailable

# Seconds; from a few milliseconds (a warm GPU) to minutes (a long answer on a CPU).
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
TOKEN_GAP_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5)


class ApiMetrics:
    def __init__(self) -> None:
        self.registry = registry = CollectorRegistry()
        self.requests = Counter(
            "spate_requests", "HTTP requests answered, by route template and status code.",
            ["route", "status"], registry=registry,
        )
        self.responses_in_flight = Gauge(
            "spate_responses_in_flight", "Responses this replica is streaming or waiting on.",
            registry=registry,
        )
        self.time_to_first_token = Histogram(
            "spate_time_to_first_token_seconds",
            "From the request's arrival to its first generated token (reasoning included).",
            buckets=LATENCY_BUCKETS, registry=registry,
        )
        self.inter_token_latency = Histogram(
            "spate_inter_token_latency_seconds",
            "Mean gap between a response's generated tokens after the first, one sample a response.",
            buckets=TOKEN_GAP_BUCKETS, registry=registry,
        )
        self.end_to_end_latency = Histogram(
            "spate_end_to_end_latency_seconds",
            "From the request's arrival to the response's terminal event.",
            buckets=LATENCY_BUCKETS, registry=registry,
        )
        self.nats_rtt = Gauge(
            "spate_nats_rtt_seconds", "Round trip to the NATS server, measured at scrape time.",
            registry=registry,
        )
        self.nats_connected = Gauge(
            "spate_nats_connected", "1 while this replica is connected to NATS.", registry=registry,
        )
        self.queue_pending = Gauge(
            "spate_queue_pending_requests",
            "Requests in a model's queue that no worker has taken yet.", ["model"], registry=registry,
        )
        self.queue_ack_pending = Gauge(
            "spate_queue_ack_pending_requests",
            "Requests a worker of the model has taken and not finished (acknowledged) yet.",
            ["model"], registry=registry,
        )
        self.store_lag = Gauge(
            "spate_store_projection_lag_events",
            "Events in the log the store's projection has not applied yet (store on only).",
            registry=registry,
        )

    async def scrape(
        self, journal: Journal, admission: Admission, projection: str | None
    ) -> bytes:
        """The text exposition, after reading the values that live elsewhere."""
        self.responses_in_flight.set(admission.inflight)
        self.nats_connected.set(1 if journal.connected else 0)
        if journal.connected:
            with contextlib.suppress(JournalUnavailable):
                self.nats_rtt.set(await journal.rtt())
            with contextlib.suppress(JournalUnavailable):
                await self._read_queues(journal)
            if projection is not None:
                with contextlib.suppress(JournalUnavailable):
                    backlog = await journal.feed_backlog(projection)
                    if backlog is not None:
                        self.store_lag.set(backlog.pending + backlog.ack_pending)
        return bytes(generate_latest(self.registry))

    async def _read_queues(self, journal: Journal) -> None:
        # A model that lost its last worker keeps its queue; its depth matters most then,
        # but its card is all that is left: read every advertised model.
        for model in await journal.registry.model_names():
            backlog = await journal.request_backlog(model)
            if backlog is not None:
                self.queue_pending.labels(model).set(backlog.pending)
                self.queue_ack_pending.labels(model).set(backlog.ack_pending)


class ResponseTimer:
    """The latencies of one response, observed once when it ends."""

    __slots__ = ("_metrics", "_clock", "_started", "_first_token", "_last_token", "_tokens_after_first", "_done")

    def __init__(self, metrics: ApiMetrics, clock: Callable[[], float]) -> None:
        self._metrics = metrics
        # The event loop's clock, which the fold loop already reads for every event.
        self._clock = clock
        self._started = clock()
        self._first_token: float | None = None
        self._last_token = 0.0
        self._tokens_after_first = 0
        self._done = False

    def tokens(self, count: int, now: float) -> None:
        """`count` tokens arrived at `now` (one decode step's event)."""
        if count <= 0:
            return
        if self._first_token is None:
            self._first_token = now
            count -= 1
        self._last_token = now
        self._tokens_after_first += count

    def finish(self) -> None:
        if self._done:
            return
        self._done = True
        now = self._clock()
        self._metrics.end_to_end_latency.observe(now - self._started)
        if self._first_token is None:
            return
        self._metrics.time_to_first_token.observe(self._first_token - self._started)
        if self._tokens_after_first > 0:
            gap = (self._last_token - self._first_token) / self._tokens_after_first
            self._metrics.inter_token_latency.observe(gap)


def route_label(scope: dict[str, Any]) -> str:
    """The matched route's template (`/v1/responses/{response_id}`), never the raw path, so
    ids do not become label values."""
    route = scope.get("route")
    path = getattr(route, "path", None)
    return path if isinstance(path, str) else "unmatched"


class RequestMetrics:
    """ASGI middleware counting every answered request by route and status; a request that
    raised past every handler counts as the 500 the server answers."""

    def __init__(self, app: Any, metrics: ApiMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 500

        async def send_with_status(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, send_with_status)
        finally:
            self.metrics.requests.labels(route_label(scope), str(status)).inc()
