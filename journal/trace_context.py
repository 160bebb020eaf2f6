"""W3C trace context (`traceparent`) carried from an HTTP request to the worker: the API
passes a valid header on in the request event's NATS headers; logs show its trace id."""

from __future__ import annotations

import re

TRACEPARENT_HEADER = "traceparent"

# version-traceid-parentid-flags; an all-zero trace or parent id is invalid (W3C).
_TRACEPARENT = re.compile(r"^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")


def valid_traceparent(value: str | None) -> str | None:
    """The header as it may be passed on, or None when it is absent or malformed (the W3C
    rule: a receiver ignores a traceparent it cannot parse)."""
    if not value:
        return None
    value = value.strip().lower()
    match = _TRACEPARENT.match(value)
    if match is None or match.group(1) == "ff":
        return None
    if set(match.group(2)) == {"0"} or set(match.group(3)) == {"0"}:
        return None
    return value


def trace_id_of(traceparent: str | None) -> str | None:
    """The 32-hex-digit trace id of a valid traceparent, or None."""
    valid = valid_traceparent(traceparent)
    return valid.split("-")[1] if valid is not None else None
