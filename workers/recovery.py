"""What a response's stored log says about its progress, for a redelivered request.

A replacement worker continues a dead worker's response from the next seq, with the
token ids already emitted, so the client sees one uninterrupted stream.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from events import GenerationFailed, GenerationFinished, GenerationStarted, TokensGenerated


@dataclass(slots=True)
class PriorProgress:
    next_seq: int = 1
    output_token_ids: list[int] = field(default_factory=list)
    finished: bool = False
    started: bool = False
    # A worker finished preparing it (its GenerationStarted is in the log).
    prepared: bool = False


def progress_of(log: Iterable[Any]) -> PriorProgress:
    """Fold a stored log (in seq order, as the journal reads it) into its progress."""
    progress = PriorProgress()
    last_seq = -1
    for event in log:
        last_seq = event.seq
        if isinstance(event, TokensGenerated):
            progress.output_token_ids.extend(event.token_ids)
            progress.started = True
        elif isinstance(event, GenerationStarted):
            progress.prepared = True
        elif isinstance(event, (GenerationFailed, GenerationFinished)):
            progress.finished = True
    progress.next_seq = max(last_seq + 1, 1)
    return progress
