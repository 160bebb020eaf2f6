"""POST /v1/responses: validate, publish one RequestAccepted, fold the log into SSE or JSON."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse
from sse_starlette import EventSourceResponse, ServerSentEvent

from api.admission import Admission
from api.body import read_request
from api.bus import Bus
from api.deps import AdmissionDep, BusDep, SettingsDep, require_api_key
from api.errors import APIError, BusUnavailable
from api.event_log import EventLog
from api.normalize import accept
from api.request_model import ResponsesRequest
from events import GenerationFailed, ModelCard, ResponseFold
from events.ids import new_response_id

router = APIRouter(dependencies=[Depends(require_api_key)])

# Failures that say the request itself was bad, or that nothing could serve it: with no
# output yet, a plain HTTP client gets them as that status rather than a 200 carrying a
# failed Response.
ERROR_STATUS = {
    "context_length_exceeded": 400,
    "invalid_prompt": 400,
    "invalid_value": 400,
    "model_unavailable": 503,
    "bus_unavailable": 503,
}


@router.post("/v1/responses")
async def create_response(
    request: Request, bus: BusDep, settings: SettingsDep, admission: AdmissionDep
) -> Any:
    body = await read_request(request, settings.max_body_bytes)
    card = await check_model(bus, body)
    admission.admit()
    try:
        event = accept(body, await response_id_for(bus, body), card.default_sampling)
        events = await bus.follow(event.response_id)
        await bus.publish_request(event)
    except BaseException:
        admission.release()
        raise
    if body.stream:
        return EventSourceResponse(
            sse_stream(events, bus, admission, event.response_id),
            ping=int(settings.sse_ping_s),
        )
    return await json_reply(request, events, bus, admission, event.response_id)


async def response_id_for(bus: Bus, body: ResponsesRequest) -> str:
    if body.request_id is None:
        return new_response_id()
    if await bus.response_exists(body.request_id):
        raise APIError(400, f"The request_id '{body.request_id}' is already in use.",
                       param="request_id", code="invalid_value")
    return body.request_id


async def check_model(bus: Bus, body: ResponsesRequest) -> ModelCard:
    card = await bus.model_card(body.model)
    if card is None:
        raise APIError(404, f"The model '{body.model}' does not exist.", param="model",
                       code="model_not_found")
    if body.thinking_token_budget is not None and not card.supports_reasoning:
        raise APIError(
            400,
            f"The model '{body.model}' has no reasoning markers, so 'thinking_token_budget' cannot apply.",
            param="thinking_token_budget", code="invalid_value",
        )
    if not await bus.is_live(body.model):
        raise APIError(503, f"No worker is serving the model '{body.model}' right now.",
                       param="model", code="model_unavailable")
    return card


async def fold_events(
    events: EventLog, state: ResponseFold, bus: Bus, idle: float = 1.0
) -> AsyncIterator[list[dict[str, Any]]]:
    """Yield each batch of SSE events the fold produces, until the response is done.

    A lost bus, or a queued request whose model lost its last worker, becomes a local
    generation.failed, so clients see `error` and `response.failed`, never a hang.
    """
    while not state.done:
        try:
            event = await events.next(timeout=idle)
            if event is None and state.status == "queued" and state.request is not None:
                if not await bus.is_live(state.request.model):
                    bus.cancel_soon(state.request.response_id, "requested")
                    yield state.apply(local_failure(
                        state, "model_unavailable",
                        f"No worker is serving the model '{state.request.model}' any more.",
                    ))
                    return
        except BusUnavailable as error:
            yield state.apply(local_failure(state, "bus_unavailable", str(error)))
            return
        if event is None:
            yield []
            continue
        produced = state.apply(event)
        if produced:
            yield produced


def local_failure(state: ResponseFold, code: str, message: str) -> GenerationFailed:
    """A failure this API replica observed; folded locally, never published."""
    return GenerationFailed(
        response_id=state.request.response_id if state.request else "unknown",
        seq=state.last_seq + 1, code=code, message=message,
    )


async def sse_stream(
    events: EventLog, bus: Bus, admission: Admission, response_id: str
) -> AsyncIterator[ServerSentEvent]:
    state = ResponseFold()
    try:
        async for batch in fold_events(events, state, bus):
            for sse in batch:
                yield ServerSentEvent(
                    data=json.dumps(sse, separators=(",", ":")),
                    event=sse["type"],
                    id=str(sse["sequence_number"]),
                )
    finally:
        admission.release()
        await events.close()
        if not state.done:
            bus.cancel_soon(response_id, "client_disconnected")


async def json_reply(
    request: Request, events: EventLog, bus: Bus, admission: Admission, response_id: str
) -> JSONResponse:
    state = ResponseFold()
    try:
        async for _ in fold_events(events, state, bus):
            if not state.done and await request.is_disconnected():
                bus.cancel_soon(response_id, "client_disconnected")
                break
    finally:
        admission.release()
        await events.close()
    response = state.response()
    error = response.get("error") or {}
    status = ERROR_STATUS.get(error.get("code") or "")
    if response["status"] == "failed" and status is not None and not response["output"]:
        last = next(e for e in reversed(state.sse_events) if e["type"] == "error")
        raise APIError(status, error["message"], param=last.get("param"), code=error["code"])
    return JSONResponse(response)
