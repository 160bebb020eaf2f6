"""POST /v1/responses: build the request's event, publish it, and answer with the
response's events as SSE or its Response as JSON (api/streaming)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from fastapi import APIRouter, Depends, Request

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
from api.lowering.encrypted_content import sealer_for
from api.lowering.request_event import request_event
from api.metrics import ResponseTimer
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
    slots = api_state(request).slots
    async with background_slot(slots, settings.key_max_background, event.background, owner,
                               event.response_id):
        if event.background and not event.stream:
            return await background_reply(request, journal, event, traceparent, claim=claim)
        seal = sealer_for(body, content_keys, owner)
        live = await open_live_response(journal, admission, event, traceparent, drain,
                                        claim=claim, timer=timer, outgoing=seal)
    log.info("accepted %s for %s", event.response_id, event.model,
             extra={"response_id": event.response_id, "trace_id": trace_id_of(traceparent)})
    if event.stream:
        return live_sse_reply(live, settings, cancel_on_disconnect=not event.background)
    return await json_reply(request, live, stored=event.store)
