"""What the journal raises: callers map these to their own answers (the API to a 503)."""

from __future__ import annotations


class JournalUnavailable(Exception):
    """NATS cannot be reached, or did not answer in time."""


class PublishFailed(Exception):
    """An event could not be persisted; the request must go back to the queue."""
