"""The small option objects of the current Responses surface that spate accepts without
changing what it generates: each one's treatment (and why it cannot mislead) is in
api/schema/fields.py, and every object below refuses keys the official SDK does not define."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from api.schema.model_base import StrictModel

# Bounds on client_metadata: Codex sends two pairs, one a JSON string of some hundred bytes.
MAX_CLIENT_METADATA_PAIRS = 16
MAX_CLIENT_METADATA_KEY = 64
MAX_CLIENT_METADATA_VALUE = 4096


class AccessPrograms(StrictModel):
    """Domain access programs of OpenAI's platform. Every served model runs as the
    Standard program does; the Daybreak programs unlock capabilities spate has no way to
    grant, so asking for one is refused rather than quietly served as Standard."""

    cyber: Literal["standard"] | None = None


class BackgroundOptions(StrictModel):
    """A background response starts at once here, which meets every completion window."""

    completion_window: Literal["soonest", "2h", "8h"] | None = None
    continuation_id: str | None = Field(default=None, min_length=1, max_length=200)


class ImageOptions(StrictModel):
    """How image inputs are compressed; a text-only model is given no images to compress."""

    context_compression: Literal["auto", "enabled", "disabled"] | None = None


class StreamOptions(StrictModel):
    """`include_obfuscation` pads delta events against length side channels on an
    encrypted link; spate's events carry no padding either way.
    `reasoning_summary_delivery` (Codex sends `sequential_cutoff`) asks that a reasoning
    item's summary be delivered before the items after it start; a worker streams each
    output item to its end before the next begins, so that is how every stream here is
    delivered, and the one value is taken as it stands."""

    include_obfuscation: bool | None = None
    reasoning_summary_delivery: Literal["sequential_cutoff"] | None = None


def client_metadata_limits(value: dict[str, str] | None) -> dict[str, str] | None:
    """client_metadata rides on the request event, so its size is bounded like every
    other list a client controls."""
    if value is None:
        return value
    if len(value) > MAX_CLIENT_METADATA_PAIRS:
        raise ValueError(f"client_metadata holds at most {MAX_CLIENT_METADATA_PAIRS} pairs")
    for key, text in value.items():
        if len(key) > MAX_CLIENT_METADATA_KEY:
            raise ValueError(f"keys are at most {MAX_CLIENT_METADATA_KEY} characters")
        if len(text) > MAX_CLIENT_METADATA_VALUE:
            raise ValueError(f"values are at most {MAX_CLIENT_METADATA_VALUE} characters")
    return value

