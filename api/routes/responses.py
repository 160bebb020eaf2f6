"""POST /v1/responses: build the request's event, publish it, and answer with the
response's events as SSE or its Response as JSON (api/streaming)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from fastapi import APIRouter, Depends, Request, Response

from api.deps import (
    AdmissionDep,
    ContentKeysDep,
    DrainDep,
    JournalDep,
    MetricsDep,
    OwnerDep,
    SettingsDep,
    StoreDep,
    require_api_key,
)
from api.guards.admission import background_slot
from api.guards.rate_limits import Charge, label
from api.lowering.encrypted_content import sealer_for
from api.lowering.request_event import request_event
from api.metrics import ResponseTimer
from api.routes.turn_state import follow_turn, presented_turn, turn_state_header
from api.schema.body import read_request
from api.state import api_state
from api.streaming import background_reply, json_reply, live_sse_reply, open_live_response
from journal.trace_context import TRACEPARENT_HEADER, trace_id_of, valid_traceparent

router = APIRouter(dependencies=[Depends(require_api_key)])
log = logging.getLogger("spate.api")


@router.post("/v1/responses")
async def create_response(
    request: Request, journal: JournalDep, settings: SettingsDep, admission: AdmissionDep,
    owner: OwnerDep, metrics: MetricsDep, drain: DrainDep, content_keys: ContentKeysDep,
    store: StoreDep,
) -> Any:
    timer = ResponseTimer(metrics, asyncio.get_running_loop().time)
    traceparent = valid_traceparent(request.headers.get(TRACEPARENT_HEADER))
    body = await read_request(request, settings.max_body_bytes)
    event = await request_event(store, journal, settings, body, owner, content_keys)
    claim = body.request_id is not None
    state = api_state(request)
    turn = presented_turn(request, state, owner)
    follow_turn(state, event.response_id, turn)
    charge = await state.rate_limiter.admit(event)
    reply: Response
    try:
        async with background_slot(state.slots, settings.key_max_background, event.background,
                                   owner, event.response_id):
            if event.background and not event.stream:
                reply = await background_reply(request, journal, event, traceparent, claim=claim)
                reply.headers.update(turn_state_header(request, state, owner, event.response_id,
                                                       turn))
                return with_rate_limits(reply, charge)
            seal = sealer_for(body, content_keys, owner)
            live = await open_live_response(journal, admission, event, traceparent, drain,
                                            claim=claim, timer=timer, outgoing=seal)
    except BaseException as error:  # nothing ran: nothing is spent
        if charge is not None:
            charge.refund()
        label(error, charge)
        raise
    if charge is not None:
        live.on_end = charge.true_up
    log.info("accepted %s for %s", event.response_id, event.model,
             extra={"response_id": event.response_id, "trace_id": trace_id_of(traceparent)})
    turn_header = turn_state_header(request, state, owner, event.response_id, turn)
    if event.stream:
        reply = live_sse_reply(live, settings, cancel_on_disconnect=not event.background)
        reply.headers.update(turn_header)
        return with_rate_limits(reply, charge)
    try:
        reply = await json_reply(request, live, stored=event.store)
    except BaseException as error:
        label(error, charge)
        raise
    reply.headers.update(turn_header)
    return with_rate_limits(reply, charge)


def with_rate_limits(reply: Response, charge: Charge | None) -> Response:
    """`reply` with the x-ratelimit-* headers of its create's charge."""
    if charge is not None:
        reply.headers.update(charge.headers)
    return reply
