"""One generated or warmed response on a socket: a generated one is published and its
log folded by the streaming module every transport reads (api/streaming), its events
sent to the lane; `generate: false` has a worker prefill its prompt, and is answered by
the connection."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from api.errors import APIError
from api.lowering.encrypted_content import ReasoningSealer
from api.lowering.request_event import BuiltRequest
from api.metrics import ResponseTimer
from api.state import ApiState
from api.streaming import open_live_response
from api.websocket.protocol import server_event
from events import GenerationFinished, RequestAccepted, ResponseFold
from events.generation import Usage
from events.ids import new_response_id

log = logging.getLogger("spate.api.socket")

Send = Callable[[dict[str, Any]], Awaitable[None]]


async def streamed(
    state: ApiState, built: BuiltRequest, seal: ReasoningSealer | None, stream_id: str | None,
    send: Send,
) -> dict[str, Any] | None:
    """Publish the request, send its events to the lane, and return the final Response
    (None when a shutdown cut the stream: the response goes on in its worker). A socket
    gone before the end cancels the generation unless the response is stored, to be read
    back later."""
    event = built.event
    timer = ResponseTimer(state.metrics, asyncio.get_running_loop().time)
    # A socket has no headers for each create: its budget's x-ratelimit-* are not sent,
    # a create past it is a 429 error event.
    charge = await state.rate_limiter.admit(event)
    try:
        live = await open_live_response(state.journal, state.admission, event, None,
                                        state.drain, claim=built.body.request_id is not None,
                                        timer=timer, outgoing=seal)
    except BaseException:
        if charge is not None:
            charge.refund()
        raise
    if charge is not None:
        live.on_end = charge.true_up
    log.info("accepted %s for %s on a WebSocket", event.response_id, event.model,
             extra={"response_id": event.response_id})
    async with live.serving(cancel_unfinished=not event.store):
        async for sse in live:
            await send(server_event(sse, stream_id))
        if live.cut:
            await send(server_event(live.cut_notice(), stream_id))
            return None
    return live.going_out(live.state.response())


def warm_request(event: RequestAccepted) -> RequestAccepted:
    """What a worker runs for a `generate: false` create: its prompt, rendered as the
    generated turn would render it, under an id of its own (the client's response id
    stays the connection's), with one output token that nobody reads and nothing stored
    or added to a conversation. Its prefill leaves the prompt in that worker's prefix
    cache, where the router sends the turn that builds on it. A new event, validated as
    every request event is."""
    sampling = {**event.sampling.model_dump(), "max_output_tokens": 1, "top_logprobs": None}
    return RequestAccepted.model_validate({
        **event.model_dump(), "response_id": new_response_id(), "sampling": sampling,
        "store": False, "background": False, "conversation_id": None, "compaction": None,
    })


async def warmed(state: ApiState, built: BuiltRequest, stream_id: str | None, send: Send
                 ) -> dict[str, Any]:
    """`generate: false`: the request checked and lowered as for a generated turn, its
    history then held by the connection under a response id, with no output, once a
    worker has prefilled its prompt (`warm_request`); the response is the connection's
    alone. A warm-up that fails or is cut only loses the cache: the answer is the same. It
    spends the owner's rate-limit budget as a generated turn does (a prefill costs the worker
    as much): past it, the create is the 429 error event any create gets."""
    warm = warm_request(built.event)
    charge = await state.rate_limiter.admit(warm)
    try:
        live = await open_live_response(state.journal, state.admission, warm, None,
                                        state.drain, claim=False)
        if charge is not None:
            live.on_end = charge.true_up
        async with live.serving(cancel_unfinished=True):
            async for _ in live:
                pass  # its one token is nobody's
    except APIError as error:  # the replica or its owner at their bound: no warm-up
        if charge is not None:
            charge.refund()
        log.info("not warming for %s: %s", built.event.response_id, error.message)
    fold, event = ResponseFold(), built.event
    finished = GenerationFinished(response_id=event.response_id, seq=event.seq + 1,
                                  finish_reason="stop", usage=Usage(input_tokens=0, output_tokens=0))
    for log_event in (event, finished):
        for sse in fold.apply(log_event):
            await send(server_event(sse, stream_id))
    return fold.response()
