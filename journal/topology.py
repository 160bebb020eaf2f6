"""The streams, buckets and consumers spate needs, and declaring them on a server.

Declaring is idempotent: it runs at every connect and reconnect, so a NATS server that
comes back empty (a restart without its data folder) gets everything back.
"""

from __future__ import annotations

import logging
from typing import Any

from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, RePublish
from nats.js.errors import APIError

from events.subjects import (
    CANCELS_SUBJECT_PREFIX,
    EVENTS_STREAM,
    EVENTS_SUBJECT_PREFIX,
    LEASES_SUBJECT_PREFIX,
    LIVE_EVENTS_SUBJECT_PREFIX,
    LOAD_FAILURES_BUCKET,
    MODELS_BUCKET,
    RATE_LIMITS_BUCKET,
    REQUESTS_STREAM,
    REQUESTS_SUBJECT_PREFIX,
    WORKERS_BUCKET,
    request_subject,
    worker_consumer,
)
from journal.settings import JournalSettings

log = logging.getLogger("spate.journal")

# How long JetStream remembers a Nats-Msg-Id to drop a retried publish.
DUPLICATE_WINDOW_S = 120.0
# How long a worker's failure to load a model is told to clients: long enough to outlast
# an orchestrator's restart back-off (each failed start writes it again), short enough
# that a model nobody tries to serve any more stops being reported.
LOAD_FAILURE_TTL_S = 900.0
# A rate-limit entry nobody writes for this long is dropped (journal/rate_limits.py): a
# budget refills within a minute, so by then it is whole again, unless a true-up charged
# it past that, and then the excess is forgiven.
RATE_LIMIT_STATE_TTL_S = 300.0


def stream_configs(settings: JournalSettings) -> list[dict[str, Any]]:
    # JetStream refuses a duplicate window longer than the stream's max age: a short
    # SPATE_EVENTS_MAX_AGE_S shortens it too (an id cannot outlive its message anyway).
    duplicate_window = min(DUPLICATE_WINDOW_S, settings.events_max_age_s)
    return [
        {
            "name": REQUESTS_STREAM,
            "subjects": [f"{REQUESTS_SUBJECT_PREFIX}.>"],
            "max_age": settings.events_max_age_s,
            "duplicate_window": duplicate_window,
            "num_replicas": settings.stream_replicas,
        },
        {
            "name": EVENTS_STREAM,
            "subjects": [
                f"{EVENTS_SUBJECT_PREFIX}.>", f"{CANCELS_SUBJECT_PREFIX}.>",
                f"{LEASES_SUBJECT_PREFIX}.>",
            ],
            "max_age": settings.events_max_age_s,
            "duplicate_window": duplicate_window,
            "num_replicas": settings.stream_replicas,
            # What the stream stored, and only that, goes on to the live subjects (a
            # plain subscriber of spate.events.* also gets publishes the stream refused:
            # a fenced writer's, a duplicate). A stream declared before this had no
            # republish: `declare` updates it in place.
            "republish": RePublish(
                src=f"{EVENTS_SUBJECT_PREFIX}.>", dest=f"{LIVE_EVENTS_SUBJECT_PREFIX}.>"
            ),
        },
    ]


async def declare(js: JetStreamContext, settings: JournalSettings) -> None:
    """Create the streams and buckets, or bring existing ones to this configuration."""
    for config in stream_configs(settings):
        try:
            await js.add_stream(**config)
        except APIError as error:  # it exists with other settings
            if "already in use" not in str(error):
                raise
            await js.update_stream(**config)
    replicas = settings.stream_replicas
    await js.create_key_value(bucket=MODELS_BUCKET, history=1, replicas=replicas)
    await js.create_key_value(
        bucket=WORKERS_BUCKET, history=1, ttl=settings.worker_ttl_s, replicas=replicas
    )
    await js.create_key_value(
        bucket=LOAD_FAILURES_BUCKET, history=1, ttl=LOAD_FAILURE_TTL_S, replicas=replicas
    )
    await js.create_key_value(
        bucket=RATE_LIMITS_BUCKET, history=1, ttl=RATE_LIMIT_STATE_TTL_S, replicas=replicas
    )


def request_consumer_config(model: str, ack_wait_s: float, max_deliver: int) -> ConsumerConfig:
    """The durable pull consumer every worker of `model` shares: explicit acks, a
    redelivery after `ack_wait_s` without a heartbeat, at most `max_deliver` tries."""
    return ConsumerConfig(
        durable_name=worker_consumer(model),
        filter_subject=request_subject(model),
        ack_policy=AckPolicy.EXPLICIT,
        ack_wait=ack_wait_s,
        max_deliver=max_deliver,
        max_ack_pending=-1,
    )


def projection_consumer_config(durable_name: str, ack_wait_s: float) -> ConsumerConfig:
    """The durable pull consumer a projection of every response's events shares (the
    store): explicit acks, redelivered until it is applied."""
    return ConsumerConfig(
        durable_name=durable_name,
        filter_subject=f"{EVENTS_SUBJECT_PREFIX}.>",
        ack_policy=AckPolicy.EXPLICIT,
        ack_wait=ack_wait_s,
        max_ack_pending=-1,
    )


async def declare_consumer(js: JetStreamContext, stream: str, config: ConsumerConfig) -> None:
    try:
        # A durable consumer that exists with other settings is brought to these by the
        # same create (nats-py has no separate update call).
        await js.add_consumer(stream, config)
    except APIError as error:  # a setting the server does not let change
        log.warning("consumer %s cannot take these settings (%s)", config.durable_name, error)
        raise
