"""Every NATS name spate uses: streams, subjects, consumers and the model registry bucket.

Queue consumers outside spate read these streams too, so the names are part of the
public contract (docs/events.md).
"""

from __future__ import annotations

import re

REQUESTS_STREAM = "SPATE_REQUESTS"
REQUESTS_SUBJECT_PREFIX = "spate.requests"

EVENTS_STREAM = "SPATE_EVENTS"
EVENTS_SUBJECT_PREFIX = "spate.events"
# Core NATS, not a stream: the EVENTS stream republishes each response event here once it
# has stored it, so live readers see only what the log holds (journal/live_feed.py).
LIVE_EVENTS_SUBJECT_PREFIX = "spate.live.events"
CANCELS_SUBJECT_PREFIX = "spate.cancels"
# Who may write a response's log now (journal/lease.py); in the EVENTS stream.
LEASES_SUBJECT_PREFIX = "spate.leases"
# Core NATS, not a stream: what each worker's prefix cache holds and how busy it is.
CACHE_SUBJECT_PREFIX = "spate.cache"
# Request-reply, not a stream: "how many input tokens would this request be?"
COUNTS_SUBJECT_PREFIX = "spate.counts"

# Served models (name, context length, reasoning markers), one key per model; no TTL.
MODELS_BUCKET = "spate_models"
# Liveness: each worker re-puts its models' keys well inside the bucket's TTL.
WORKERS_BUCKET = "spate_workers"
# Models a worker could not load (ModelLoadFailure), one key per model, with a TTL: the
# API's answers for a model no worker serves name the reason while it is recent.
LOAD_FAILURES_BUCKET = "spate_load_failures"
# Per-key and per-group rate-limit state (journal/rate_limits.py), one key per limit
# subject, with a TTL: every API replica reads and updates the same budgets.
RATE_LIMITS_BUCKET = "spate_rate_limits"

_UNSAFE_TOKEN = re.compile(r"[^A-Za-z0-9_-]")


def subject_token(name: str) -> str:
    """One NATS subject token for a free-form name (models may contain '.' or '/')."""
    if not name:
        raise ValueError("a subject token cannot be empty")
    return _UNSAFE_TOKEN.sub("_", name)


def request_subject(model: str) -> str:
    return f"{REQUESTS_SUBJECT_PREFIX}.{subject_token(model)}"


def direct_subject(model: str, worker_id: str) -> str:
    """The request subject only `worker_id` reads (requests routed to its cache); the
    shared consumer's filter is the model's subject exactly, so it never sees these."""
    return f"{request_subject(model)}.to.{subject_token(worker_id)}"


def worker_client_name(worker_id: str) -> str:
    """The NATS client name a worker connects with; the leases it takes carry it."""
    return f"spate-worker-{subject_token(worker_id)}"


def routed_worker(subject: str) -> str | None:
    """The worker (as its subject token) a request subject is routed to; None for the
    shared queue's."""
    _, routed, token = subject.partition(".to.")
    return token if routed else None


def cache_subject(model: str, worker_id: str) -> str:
    return f"{CACHE_SUBJECT_PREFIX}.{subject_token(model)}.{subject_token(worker_id)}"


def direct_consumer_prefix(model: str) -> str:
    """What the name of every worker's own consumer of `model` begins with."""
    return f"{worker_consumer(model)}-"


def direct_consumer(model: str, worker_id: str) -> str:
    """The durable pull consumer of `worker_id`'s own request subject."""
    return direct_consumer_prefix(model) + subject_token(worker_id)


def events_subject(response_id: str) -> str:
    return f"{EVENTS_SUBJECT_PREFIX}.{subject_token(response_id)}"


def live_events_subject(response_id: str) -> str:
    """Where the EVENTS stream republishes what it stored on `events_subject`."""
    return f"{LIVE_EVENTS_SUBJECT_PREFIX}.{subject_token(response_id)}"


def cancel_subject(response_id: str) -> str:
    return f"{CANCELS_SUBJECT_PREFIX}.{subject_token(response_id)}"


def lease_subject(response_id: str) -> str:
    return f"{LEASES_SUBJECT_PREFIX}.{subject_token(response_id)}"


def count_subject(model: str) -> str:
    return f"{COUNTS_SUBJECT_PREFIX}.{subject_token(model)}"


def counters_queue(model: str) -> str:
    """The queue group of `model`'s workers on its count subject: one answers each."""
    return f"spate-counters-{subject_token(model)}"


def worker_consumer(model: str) -> str:
    """The durable pull consumer all workers serving `model` share."""
    return f"spate-workers-{subject_token(model)}"


def event_msg_id(response_id: str, seq: int) -> str:
    """Nats-Msg-Id of one response event: a retried publish is dropped by JetStream."""
    return f"{response_id}:{seq}"


def model_key(model: str) -> str:
    """Key of a model in the registry buckets."""
    return subject_token(model)
