"""Replaying a stored log: the journal's log reader and the API's fold, rendered as the
SSE bytes the API streams. Compared with what a live stream sent."""

from __future__ import annotations

import re
from typing import Any

import httpx

from api.streaming import server_sent_event
from api.streaming.sse import stream_end
from events import ResponseFold
from journal import Journal, JournalSettings

# sse-starlette's keep-alive comments carry the time: not part of the events.
_COMMENT = re.compile(rb"^:[^\r\n]*\r\n\r\n", re.MULTILINE)


def live_sse(base_url: str, body: dict[str, Any]) -> bytes:
    """The bytes of one streamed response, keep-alive comments left out."""
    with httpx.stream("POST", f"{base_url}/v1/responses", json={**body, "stream": True},
                      timeout=300) as reply:
        reply.raise_for_status()
        raw = b"".join(reply.iter_raw())
    return _COMMENT.sub(b"", raw)


def rendered(log: list[Any]) -> bytes:
    """The SSE bytes a live stream of `log` sends, its `data: [DONE]` end included."""
    state = ResponseFold()
    events = b"".join(
        server_sent_event(sse).encode() for event in log for sse in state.apply(event)
    )
    return events + stream_end().encode() if state.done else events


def response_id_of(sse: bytes) -> str:
    found = re.search(rb'"response":\{"id":"([^"]+)"', sse)
    assert found is not None, sse[:300]
    return found.group(1).decode()


async def replayed_sse(nats_url: str, response_id: str) -> bytes:
    journal = Journal(JournalSettings(nats_url=nats_url), name="spate-test-replay")
    journal.start()
    try:
        assert await journal.wait_connected()
        return rendered(await journal.read_log(response_id))
    finally:
        await journal.close()
