"""The replies of a response created without `stream`: the Response as one JSON body
once it ends, or at once for a background response nobody follows."""

from __future__ import annotations

import contextlib

from fastapi import Request
from fastapi.responses import JSONResponse

from api.errors import ERROR_STATUS, APIError
from api.guards.drain import SHUTTING_DOWN
from api.state import projector_of
from api.streaming.live_response import LiveResponse
from events import RequestAccepted, ResponseFold
from journal import Journal, JournalUnavailable
from store import StoreError


async def json_reply(request: Request, live: LiveResponse, stored: bool) -> JSONResponse:
    """The Response once it ends. A client that goes first cancels it; a shutdown's cut
    is a 503 naming where to read it, and the response goes on. A failure with no
    output that says the request was bad (or nothing could serve it) is that status.
    A `stored` response is in the store before the answer, so a GET right after it
    reads what it said."""
    state = live.state
    response_id = live.response_id
    async with live.serving(cancel_unfinished=False):
        while await live.next_batch() is not None:
            if not state.done and live.shutdown_cut:
                raise APIError(
                    503, f"The server is shutting down; the response {response_id} goes "
                    f"on: read it with GET /v1/responses/{response_id} (with the response "
                    "store on).", code=SHUTTING_DOWN)
            if not state.done and await request.is_disconnected():
                live.cancel_for_disconnect()
                break
    response = state.response()
    error = response.get("error") or {}
    status = ERROR_STATUS.get(error.get("code") or "")
    if response["status"] == "failed" and status is not None and not response["output"]:
        last = next(e for e in reversed(state.sse_events) if e["type"] == "error")
        raise APIError(status, error["message"], param=last.get("param"), code=error["code"])
    if stored:
        with contextlib.suppress(StoreError, JournalUnavailable):
            await projector_of(request).catch_up(response_id)
    return JSONResponse(live.going_out(response))


async def background_reply(
    request: Request, journal: Journal, event: RequestAccepted, traceparent: str | None,
    *, claim: bool,
) -> JSONResponse:
    """Publish a background response nobody follows (the work runs with no client
    attached) and answer with it queued."""
    await journal.publish_request(event, traceparent, claim=claim)
    if event.store:  # a GET right after this answer finds it
        await projector_of(request).apply(event)
    return JSONResponse(ResponseFold().apply(event)[0]["response"])
