"""One response a worker holds: its request, delivery and log writer (`Job`), and the
worker's log tagged with the response (`response_log`)."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from events import RequestAccepted
from journal import Delivery, ResponseWriter
from journal.trace_context import trace_id_of
from workers.output.step_events import StepEvents

# The worker's own logger: a response's lines read as the worker's.
log = logging.getLogger("spate.worker")


@dataclass(slots=True)
class Job:
    request: RequestAccepted
    delivery: Delivery
    publisher: ResponseWriter
    # The worker's log with this response's id and trace id on every line.
    log: logging.LoggerAdapter[logging.Logger]
    cancelled: bool = False
    finished: bool = False
    # Every output token id, kept only for enable_response_messages.
    output_token_ids: list[int] | None = None
    # Turns the engine's outputs into events; set once the prompt is built.
    events: StepEvents | None = None
    # Its prompt's prefill has been counted (on its first engine output).
    prefill_counted: bool = False


def response_log(response_id: str, traceparent: str | None) -> logging.LoggerAdapter[logging.Logger]:
    return logging.LoggerAdapter(
        log, {"response_id": response_id, "trace_id": trace_id_of(traceparent)}
    )
