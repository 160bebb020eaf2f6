"""Cache-following routing on NATS: per-worker request subjects beside the shared queue,
the cache events workers publish, and the one-lease rule that keeps a routed request from
running twice.

A routed request goes to `spate.requests.<model>.to.<worker>`, which only that worker's
own durable consumer reads. Its first delivery may start only by writing the response's
first lease (a publish that expects no lease before it); the API, when the request is
still untaken at its deadline, writes that first lease itself and hands the request to the
shared queue. One of the two writes wins, so the request runs once: the existing lease
(journal/lease.py) does the fencing.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from dataclasses import dataclass, field

from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig
from nats.js.errors import APIError, NotFoundError

from events import RequestAccepted, encode
from events.subjects import (
    direct_consumer,
    direct_subject,
    lease_subject,
    request_subject,
)
from journal.lease import EXPECTED_LAST_SUBJECT_SEQUENCE
from journal.trace_context import TRACEPARENT_HEADER

log = logging.getLogger("spate.journal.routing")

# JetStream's error code for a publish whose expected last sequence did not hold.
WRONG_LAST_SEQUENCE = 10071
# A worker's own consumer is dropped by the server after this long without the worker.
DIRECT_CONSUMER_INACTIVE_S = 3600.0


def direct_consumer_config(
    model: str, worker_id: str, ack_wait_s: float, max_deliver: int
) -> ConsumerConfig:
    return ConsumerConfig(
        durable_name=direct_consumer(model, worker_id),
        filter_subject=direct_subject(model, worker_id),
        ack_policy=AckPolicy.EXPLICIT,
        ack_wait=ack_wait_s,
        max_deliver=max_deliver,
        max_ack_pending=-1,
        inactive_threshold=DIRECT_CONSUMER_INACTIVE_S,
    )


@dataclass(slots=True)
class CacheReport:
    """What one worker holds and how busy it is: published after each response it
    finishes and on every heartbeat (then with no digests)."""

    model: str
    worker_id: str
    in_flight: int
    # Digests of the prompt prefixes it cached (api/cache_router.py computes the same ones).
    digests: list[str] = field(default_factory=list)

    def encode(self) -> bytes:
        return json.dumps({"model": self.model, "worker_id": self.worker_id,
                           "in_flight": self.in_flight, "digests": self.digests}).encode()

    @classmethod
    def decode(cls, data: bytes) -> CacheReport:
        body = json.loads(data)
        return cls(str(body["model"]), str(body["worker_id"]), int(body["in_flight"]),
                   [str(d) for d in body.get("digests", [])])


async def first_lease(js: JetStreamContext, response_id: str, holder: str) -> int | None:
    """Write `response_id`'s first lease; None when someone wrote one before."""
    try:
        ack = await js.publish(
            lease_subject(response_id), json.dumps({"holder": holder}).encode(),
            headers={EXPECTED_LAST_SUBJECT_SEQUENCE: "0"},
        )
    except APIError as error:
        if error.err_code == WRONG_LAST_SEQUENCE:
            return None
        raise
    return int(ack.seq)


async def lease_holder(js: JetStreamContext, stream: str, response_id: str) -> str | None:
    """Who wrote `response_id`'s latest lease; None when nobody has."""
    try:
        msg = await js.get_last_msg(stream, lease_subject(response_id))
    except NotFoundError:
        return None
    holder = json.loads(msg.data or b"").get("holder")
    return str(holder) if holder else None


async def fall_back(
    js: JetStreamContext, event: RequestAccepted, holder: str, deadline_s: float, timeout: float,
    traceparent: str | None,
) -> bool:
    """After `deadline_s`, hand a routed request nobody took to the shared queue; whether
    it did. The first lease decides: a worker that took it first keeps it."""
    await asyncio.sleep(deadline_s)
    lease = None
    for attempt in range(8):  # NATS away: the request must not be lost
        try:
            if lease is None:
                lease = await first_lease(js, event.response_id, holder)
                if lease is None:
                    return False  # taken by its worker
            trace = {TRACEPARENT_HEADER: traceparent} if traceparent else {}
            ack = await js.publish_async(
                request_subject(event.model), encode(event),
                headers={"Nats-Msg-Id": event.response_id, **trace},
            )
            await asyncio.wait_for(ack, timeout)
            log.info("%s was not taken in %.1fs by its routed worker: sent to the shared queue",
                     event.response_id, deadline_s)
            return True
        except Exception as error:
            log.warning("falling back %s failed (%s); again", event.response_id, error)
            await asyncio.sleep(min(2.0**attempt, 10.0))
    return False


def prefix_chain(event: RequestAccepted) -> list[tuple[str, int]]:
    """The request's prompt prefixes, shortest first, one per message boundary: each one's
    digest, scoped like the worker's prefix cache (owner, cache_salt) and by model, and
    the characters of its messages as JSON (what a router can weigh without tokenizing).
    Equal digests mean a shared prefix."""
    scope = json.dumps([event.model, event.owner, event.cache_salt]).encode()
    chain = hashlib.sha256(scope)
    prefixes = []
    size = 0
    for message in event.messages:
        dumped = message.model_dump_json()
        chain.update(dumped.encode())
        size += len(dumped)
        prefixes.append((chain.copy().hexdigest()[:32], size))
    return prefixes


def cache_key_digest(event: RequestAccepted) -> str | None:
    """The digest of the request's prompt_cache_key, scoped by owner; None without one."""
    if not event.prompt_cache_key:
        return None
    key = json.dumps([event.model, event.owner, event.prompt_cache_key]).encode()
    return "k" + hashlib.sha256(key).hexdigest()[:31]


def prefix_digests(event: RequestAccepted) -> list[str]:
    """What a worker reports it holds after running `event`: its prefixes' digests
    (`prefix_chain`), then its prompt_cache_key's."""
    digests = [digest for digest, _ in prefix_chain(event)]
    key = cache_key_digest(event)
    return digests if key is None else [*digests, key]
