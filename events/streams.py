"""The JetStream streams and buckets spate needs, described as data.

`ensure_streams` takes the caller's JetStream context, so this module still imports no
NATS client: the API and the workers each pass their own connection.
"""

from __future__ import annotations

from typing import Any

from events.subjects import (
    CANCELS_SUBJECT_PREFIX,
    EVENTS_STREAM,
    EVENTS_SUBJECT_PREFIX,
    MODELS_BUCKET,
    REQUESTS_STREAM,
    REQUESTS_SUBJECT_PREFIX,
    WORKERS_BUCKET,
)

# How long JetStream remembers a Nats-Msg-Id to drop a retried publish.
DUPLICATE_WINDOW_S = 120.0


def stream_configs(events_max_age_s: float) -> list[dict[str, Any]]:
    return [
        {
            "name": REQUESTS_STREAM,
            "subjects": [f"{REQUESTS_SUBJECT_PREFIX}.>"],
            "max_age": events_max_age_s,
            "duplicate_window": DUPLICATE_WINDOW_S,
        },
        {
            "name": EVENTS_STREAM,
            "subjects": [f"{EVENTS_SUBJECT_PREFIX}.>", f"{CANCELS_SUBJECT_PREFIX}.>"],
            "max_age": events_max_age_s,
            "duplicate_window": DUPLICATE_WINDOW_S,
        },
    ]


async def ensure_streams(js: Any, events_max_age_s: float, worker_ttl_s: float) -> None:
    """Create the streams and buckets, or bring an existing one to this configuration."""
    for config in stream_configs(events_max_age_s):
        try:
            await js.add_stream(**config)
        except Exception as error:  # the client raises a generic API error when it exists
            if "already in use" not in str(error):
                raise
            await js.update_stream(**config)
    await js.create_key_value(bucket=MODELS_BUCKET, history=1)
    await js.create_key_value(bucket=WORKERS_BUCKET, history=1, ttl=worker_ttl_s)
