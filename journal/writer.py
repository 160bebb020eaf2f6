"""Writing to a response's log: the request (seq 0 and the work queue), the worker's
events numbered by seq, and cancels. Every publish carries a Nats-Msg-Id, so a retry
after a lost ack is dropped by JetStream instead of doubled; a worker's and a
`worker_lost` also carry their lease (journal/lease.py), so only the log's current
writer can add to it."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, Literal, TypeVar

from nats.js import JetStreamContext
from nats.js.errors import APIError

from events import CancelRequested, Event, RequestAccepted, encode
from events.subjects import cancel_subject, event_msg_id, events_subject, request_subject
from journal.errors import Fenced, PayloadTooLarge, PublishFailed, ResponseIdTaken
from journal.lease import EXPECTED_LAST_SUBJECT_SEQUENCE, fence_headers, take_lease
from journal.pipeline import WRONG_LAST_SEQUENCE, PublishPipeline, is_fenced, lease_lost
from journal.trace_context import TRACEPARENT_HEADER

E = TypeVar("E", bound=Event)

log = logging.getLogger("spate.journal.writer")

PUBLISH_RETRIES = 5
# Unsettled publishes a writer keeps before it checks the settled ones.
SETTLE_EVERY = 256

# Room left for a message's headers (its Nats-Msg-Id) under the server's max_payload,
# which counts headers and payload together.
HEADER_ALLOWANCE = 512

CancelReason = Literal["client_disconnected", "requested"]


def check_payload_size(payload: bytes, max_payload: int) -> None:
    """Raise PayloadTooLarge before a publish the server would refuse. The client's own
    check comes too late for publish_async: by then it holds one of its pending-ack
    slots and a reply future that nothing ever completes, so each oversized publish
    would leak one until publishing stalls."""
    if len(payload) + HEADER_ALLOWANCE > max_payload:
        raise PayloadTooLarge(len(payload), max_payload - HEADER_ALLOWANCE)


async def publish_request(
    js: JetStreamContext, event: RequestAccepted, timeout: float, max_payload: int,
    traceparent: str | None = None, claim: bool = False, subject: str | None = None,
) -> None:
    """Write seq 0 of the response's log, then hand the request to the workers.

    The log is written first so a worker never runs a request whose log is missing. Both
    go out back to back and their acks are awaited together: one round trip, not two.
    A W3C `traceparent` rides in the headers of both, so the worker's logs join the trace.
    With `claim` (a response id the client chose), seq 0 must be the log's first message
    and its ack comes before the request goes out: of two requests with one id, exactly
    one gets the log and the other `ResponseIdTaken`, with nothing of its own published.
    A `subject` other than the model's (a worker's own, journal/routing.py) gets its own
    Nats-Msg-Id, so handing the request on to the shared queue later is no duplicate.
    """
    payload = encode(event)
    to = subject or request_subject(event.model)
    request_id = event.response_id if subject is None else f"{event.response_id}:to"
    trace = {TRACEPARENT_HEADER: traceparent} if traceparent else {}
    check_payload_size(payload, max_payload)
    if claim:
        await claim_log(js, event.response_id, payload, trace, timeout)
        ack = await js.publish_async(
            to, payload, headers={"Nats-Msg-Id": request_id, **trace},
        )
        await asyncio.wait_for(ack, timeout)
        return
    acks = [
        await js.publish_async(
            events_subject(event.response_id), payload,
            headers={"Nats-Msg-Id": event_msg_id(event.response_id, 0), **trace},
        ),
        await js.publish_async(
            to, payload, headers={"Nats-Msg-Id": request_id, **trace},
        ),
    ]
    await asyncio.wait_for(asyncio.gather(*acks), timeout)


async def claim_log(
    js: JetStreamContext, response_id: str, payload: bytes, trace: dict[str, str], timeout: float
) -> None:
    """Write seq 0 of a log that must not exist yet, or raise ResponseIdTaken. JetStream
    checks the subject is empty as it appends; within its duplicate window a second
    claim is instead answered as a duplicate of the first, which is taken all the same."""
    headers = {"Nats-Msg-Id": event_msg_id(response_id, 0),
               EXPECTED_LAST_SUBJECT_SEQUENCE: "0", **trace}
    try:
        ack = await js.publish(events_subject(response_id), payload, timeout=timeout,
                               headers=headers)
    except APIError as error:
        if error.err_code == WRONG_LAST_SEQUENCE:
            raise ResponseIdTaken(response_id) from error
        raise
    if ack.duplicate:
        raise ResponseIdTaken(response_id)


async def publish_event(js: JetStreamContext, event: Event, lease_seq: int | None = None) -> None:
    """One event of a response's log, written by someone other than its worker (under
    `lease_seq` when given: `Fenced` if another writer took the log since)."""
    headers = {"Nats-Msg-Id": event_msg_id(event.response_id, event.seq)}
    if lease_seq is not None:
        headers.update(fence_headers(event.response_id, lease_seq))
    try:
        await js.publish(events_subject(event.response_id), encode(event), headers=headers)
    except Exception as error:
        if is_fenced(error):
            raise Fenced(f"the log of {event.response_id} has another writer") from error
        raise


async def publish_cancel(js: JetStreamContext, response_id: str, reason: CancelReason) -> None:
    event = CancelRequested(response_id=response_id, seq=0, reason=reason)
    await js.publish(
        cancel_subject(response_id), encode(event),
        headers={"Nats-Msg-Id": f"{response_id}:cancel"},
    )


class ResponseWriter:
    """One response's events from its worker, under the worker's lease: never one
    awaited ack per token.

    Once JetStream refuses one of its events because another writer holds the lease,
    the writer is `fenced`: `on_fenced` runs once, and `publish` and `flush` raise
    `Fenced` from then on.
    """

    def __init__(
        self, js: JetStreamContext, pipeline: PublishPipeline, response_id: str, next_seq: int,
        lease_seq: int | None, holder: str, retry_for_s: float = 30.0,
        ack_timeout_s: float = 2.0, on_fenced: Callable[[], None] | None = None,
    ) -> None:
        self._holder = holder
        self._js = js
        self._pipeline = pipeline
        # How long an event that could not be persisted is retried (a NATS restart).
        self._retry_for_s = retry_for_s
        # An ack this late counts as lost: the event is sent again (a publish buffered
        # while NATS was away can vanish with the old socket, or meet a stream that was
        # not loaded yet). Readers wait on the gap, so it is resent while the response
        # goes on, not when it ends.
        self._ack_timeout_s = ack_timeout_s
        self._failed = False
        self.response_id = response_id
        self.next_seq = next_seq
        self.fenced = False
        self._on_fenced = on_fenced
        self._subject = events_subject(response_id)
        self._fence = fence_headers(response_id, lease_seq) if lease_seq is not None else {}
        # Each event not yet known to be persisted: its ack, itself, when it was sent.
        self._pending: list[tuple[asyncio.Future[dict[str, Any]], Event, float]] = []

    def _headers(self, seq: int) -> dict[str, str]:
        return {"Nats-Msg-Id": event_msg_id(self.response_id, seq), **self._fence}

    def _fenced(self) -> Fenced:
        if not self.fenced:
            self.fenced = True
            log.warning("%s: another writer holds the log; this one stops", self.response_id)
            if self._on_fenced is not None:
                self._on_fenced()
        return Fenced(f"the log of {self.response_id} has another writer")

    def _check_ack(self, future: asyncio.Future[dict[str, Any]]) -> None:
        if not future.cancelled() and (error := future.exception()) is not None:
            if is_fenced(error):
                self._fenced()
            else:
                self._failed = True

    async def publish(self, event_type: type[E], **fields: Any) -> E:
        """Publish without waiting for JetStream's ack; `flush` waits for all of them."""
        if self.fenced:
            raise Fenced(f"the log of {self.response_id} has another writer")
        event = event_type(response_id=self.response_id, seq=self.next_seq, **fields)
        self.next_seq += 1
        future = await self._pipeline.publish(self._subject, encode(event), self._headers(event.seq))
        future.add_done_callback(self._check_ack)
        now = asyncio.get_running_loop().time()
        self._pending.append((future, event, now))
        if len(self._pending) > SETTLE_EVERY or self._resend_due(now):
            await self._settle(done_only=True)
        return event

    def _resend_due(self, now: float) -> bool:
        """Whether an earlier event failed, or waits for its ack past the timeout, while
        NATS is up to take it again (during an outage the resend waits for it to return).
        Per token: the usual answer, no, costs two comparisons."""
        overdue = self._failed or now - self._pending[0][2] > self._ack_timeout_s
        return overdue and self._pipeline.connected

    async def flush(self, timeout: float = 10.0) -> None:
        """Wait until every event so far is persisted; republish the ones that were not."""
        await self._settle(done_only=False, timeout=timeout)

    async def _settle(self, done_only: bool, timeout: float = 10.0) -> None:
        if self.fenced:
            raise self._fenced()
        self._failed = False
        if not done_only and self._pending:
            await asyncio.wait([future for future, _, _ in self._pending],
                               timeout=min(timeout, self._ack_timeout_s))
        overdue = asyncio.get_running_loop().time() - self._ack_timeout_s
        keep: list[tuple[asyncio.Future[dict[str, Any]], Event, float]] = []
        for future, event, sent_at in self._pending:
            if not future.done():
                if done_only and sent_at > overdue:
                    keep.append((future, event, sent_at))
                    continue
                future.cancel()
                await self._republish(event)
            elif future.cancelled() or future.exception() is not None:
                if not future.cancelled() and is_fenced(future.exception()):
                    raise self._fenced()
                await self._republish(event)
        self._pending = keep

    async def _republish(self, event: Event) -> None:
        # The Nats-Msg-Id makes this safe even when the first publish did land.
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._retry_for_s
        attempt = 0
        while True:
            try:
                await self._js.publish(self._subject, encode(event), headers=self._headers(event.seq))
                return
            except Exception as error:
                if is_fenced(error):
                    raise self._fenced() from error
                if lease_lost(error):
                    await self._renew_lease()
                    continue
                if attempt >= PUBLISH_RETRIES and loop.time() >= deadline:
                    raise PublishFailed(
                        f"could not persist event {event.seq} of {self.response_id}: {error}"
                    ) from error
                log.warning("republish of %s:%d failed (%s)", self.response_id, event.seq, error)
                await asyncio.sleep(min(0.1 * 2**attempt, 0.5))
                attempt += 1

    async def _renew_lease(self) -> None:
        """NATS came back without its data: nobody holds the log, so take it again."""
        log.warning("%s: the lease is gone (NATS lost its data); taking it again", self.response_id)
        lease_seq = await take_lease(self._js, self.response_id, self._holder)
        self._fence = fence_headers(self.response_id, lease_seq)
