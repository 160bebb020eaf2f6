"""How far behind a durable consumer is: messages it has not been handed yet, and messages
handed out but not acknowledged. Read from the consumer's info, for metrics."""

from __future__ import annotations

from dataclasses import dataclass

from nats.js import JetStreamContext
from nats.js.errors import NotFoundError

from journal.errors import JournalUnavailable


@dataclass(frozen=True, slots=True)
class Backlog:
    # Stored messages matching the consumer's filter that it has not delivered yet.
    pending: int
    # Delivered and not acknowledged yet (running, or about to be redelivered).
    ack_pending: int


async def consumer_backlog(js: JetStreamContext, stream: str, durable_name: str) -> Backlog | None:
    """The consumer's backlog, or None when the consumer does not exist (yet)."""
    try:
        info = await js.consumer_info(stream, durable_name)
    except NotFoundError:
        return None
    except Exception as error:
        raise JournalUnavailable(f"Could not read consumer {durable_name}: {error}") from error
    return Backlog(pending=int(info.num_pending or 0), ack_pending=int(info.num_ack_pending or 0))
