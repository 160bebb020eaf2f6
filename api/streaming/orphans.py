"""Responses no worker can finish any more: a quiet response whose model lost its last
worker fails rather than hangs, and a started one's failure is written to its log."""

from __future__ import annotations

from events import GenerationFailed, ResponseFold
from journal import Fenced, Journal, JournalUnavailable


async def orphaned(
    state: ResponseFold, journal: Journal, quiet_s: float
) -> GenerationFailed | None:
    """The failure of a quiet response that no worker can finish any more, or None.

    Queued, it fails as `model_unavailable` here only. Started, its worker died and no
    worker of its model came to continue it within the ack wait (when JetStream hands it
    to the next one): the failure (`worker_lost`) is written to the log, so the store and
    every replica following it see the same end.
    """
    request = state.request
    if request is None:
        return None
    if state.status != "queued" and quiet_s < journal.settings.ack_wait_s:
        return None
    if await journal.registry.is_live(request.model):
        return None
    journal.cancel_soon(request.response_id, "requested")
    if state.status == "queued":
        return local_failure(
            state, "model_unavailable",
            f"No worker is serving the model '{request.model}' any more.",
        )
    failure = local_failure(
        state, "worker_lost",
        f"Every worker serving '{request.model}' stopped before the response ended.",
    )
    try:  # taking the log over fences out a worker that comes back from a freeze
        await journal.write(failure, take_over=True)
    except Fenced:  # a worker took it over in the meantime: it goes on
        return None
    except JournalUnavailable:
        pass
    return failure


def local_failure(state: ResponseFold, code: str, message: str) -> GenerationFailed:
    """A failure this API replica observed; folded locally, never published."""
    return GenerationFailed(
        response_id=state.request.response_id if state.request else "unknown",
        seq=state.last_seq + 1, code=code, message=message,
    )
