"""The envelope every spate event shares: type, schema version, response id, seq, time."""

from __future__ import annotations

import time

from pydantic import BaseModel, ConfigDict, Field


class Event(BaseModel):
    """Base of all events. Frozen: an event is never changed after it is published.

    Each subclass pins `type` (a stable, past-tense string) and `v` (its schema version)
    with Literal defaults, so both travel in every payload.
    """

    model_config = ConfigDict(frozen=True, extra="ignore")

    response_id: str = Field(min_length=1)
    seq: int = Field(ge=0)
    created_at: float = Field(default_factory=time.time)
