"""How far a model's load has come: a bar where a person watches a plain-text log on a
terminal, log records otherwise (at most one every few seconds), so a log written to a
file, a pipe or as JSON (SPATE_LOG_FORMAT=json) stays one record a line."""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Iterator, Sequence
from typing import TypeVar

from tqdm import tqdm

log = logging.getLogger("spate.worker.model")

Item = TypeVar("Item")
# Seconds between two progress records when no bar is shown.
RECORD_EVERY_S = 5.0


def bar_fits() -> bool:
    """Whether the process logs plain text to a terminal, the one place a bar's
    carriage-return updates read as one line."""
    handlers = logging.getLogger().handlers
    return bool(handlers) and all(
        isinstance(handler, logging.StreamHandler)
        and type(handler.formatter) is logging.Formatter  # not a JSON formatter
        and getattr(handler.stream, "isatty", lambda: False)()
        for handler in handlers
    )


def load_progress(items: Sequence[Item], label: str, unit: str = "tensor",
                  every_s: float = RECORD_EVERY_S) -> Iterator[Item]:
    """`items`, one by one, with the load's progress shown as it goes."""
    if bar_fits():
        yield from tqdm(items, desc=f"Loading {label}", unit=unit, file=sys.stderr)
        return
    total = len(items)
    started = last = time.monotonic()
    log.info("loading %s: %d %ss", label, total, unit)
    for done, item in enumerate(items, start=1):
        yield item
        now = time.monotonic()
        if now - last >= every_s and done < total:
            log.info("loading %s: %d/%d %ss (%.0f%%)", label, done, total, unit, 100 * done / total)
            last = now
    log.info("loaded %s: %d %ss in %.1f s", label, total, unit, time.monotonic() - started)
