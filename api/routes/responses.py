"""POST /v1/responses: validate, publish one RequestAccepted, fold the log into SSE or JSON."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse
from sse_starlette import EventSourceResponse, ServerSentEvent
from sse_starlette.sse import SendTimeoutError

from api.admission import Admission
from api.body import read_request
from api.context import (
    Context,
    context_of,
    resolved_references,
    stored_request,
    with_context,
)
from api.deps import (
    AdmissionDep,
    ContentKeysDep,
    DrainDep,
    JournalDep,
    MetricsDep,
    OwnerDep,
    SettingsDep,
    require_api_key,
)
from api.drain import SHUTTING_DOWN, Drain
from api.encrypted_content import opened_reasoning, sealer_for
from api.errors import APIError, request_id_taken
from api.input_files import refuse_images, with_file_text
from api.metrics import ResponseTimer
from api.normalize import accept
from api.request_model import ResponsesRequest
from api.store_access import projector_of, require_store_for_field, store_or_none
from api.tool_policy import check_server_tools
from events import (
    TERMINAL_SSE_TYPES,
    GenerationFailed,
    ModelCard,
    ResponseFold,
    TokensGenerated,
    encode,
)
from events.ids import new_response_id
from journal import Fenced, Journal, JournalUnavailable, LogFollower
from journal.trace_context import TRACEPARENT_HEADER, trace_id_of, valid_traceparent
from store import Store, StoreError

router = APIRouter(dependencies=[Depends(require_api_key)])
log = logging.getLogger("spate.api")

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
    request: Request, journal: JournalDep, settings: SettingsDep, admission: AdmissionDep,
    owner: OwnerDep, metrics: MetricsDep, drain: DrainDep, content_keys: ContentKeysDep,
) -> Any:
    timer = ResponseTimer(metrics, asyncio.get_running_loop().time)
    traceparent = valid_traceparent(request.headers.get(TRACEPARENT_HEADER))
    body = await read_request(request, settings.max_body_bytes)
    check_priority(body, settings.priority_floor)
    check_server_tools(body, settings.server_tools)
    body = opened_reasoning(body, content_keys, owner)
    store = stateful_store(request, body)
    body = await resolved_references(store, body, owner)
    context = await context_of(store, body, owner) if store is not None else Context()
    card = await check_model(journal, body)
    refuse_images(body, card)
    body = await with_file_text(body, settings.max_file_bytes)
    response_id = await response_id_for(store, body)
    event = accept(with_context(body, context), response_id, card.default_sampling,
                   owner=owner)
    if store is not None:
        event = stored_request(event, body, context)
    if body.background and not body.stream:
        # Nobody follows it: the work runs with no client attached.
        await journal.publish_request(event, traceparent, claim=body.request_id is not None)
        if event.store:  # a GET right after this answer finds it
            await projector_of(request).apply(event, encode(event))
        return JSONResponse(ResponseFold().apply(event)[0]["response"])
    admission.admit()
    events = None
    try:
        events = await journal.follow(event.response_id)
        await journal.publish_request(event, traceparent, claim=body.request_id is not None)
    except BaseException:
        # Nothing was published: give back the slot and the subscription.
        admission.release()
        if events is not None:
            await events.close()
        raise
    log.info("accepted %s for %s", event.response_id, event.model,
             extra={"response_id": event.response_id, "trace_id": trace_id_of(traceparent)})
    cancel_on_disconnect = not body.background
    seal = sealer_for(body, content_keys, owner)
    if body.stream:
        return CuttableStream(
            event.response_id,
            sse_stream(events, journal, admission, event.response_id, cancel_on_disconnect, timer,
                       drain, seal),
            ping=int(settings.sse_ping_s), send_timeout=settings.sse_send_timeout_s,
        )
    reply = await json_reply(request, events, journal, admission, event.response_id, timer, drain,
                             seal)
    if event.store:  # a GET right after this answer reads what it said
        with contextlib.suppress(StoreError, JournalUnavailable):
            await projector_of(request).catch_up(event.response_id)
    return reply


class CuttableStream(EventSourceResponse):
    """An SSE response whose client is cut when it takes no event for `send_timeout`
    seconds. The cut closes the event generator (its `finally` cancels the generation and
    frees the slot) and is logged as one line, not as an application error."""

    def __init__(self, response_id: str, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.response_id = response_id

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        except SendTimeoutError:
            log.warning("cut the stream of %s: its client took no event for %g s",
                        self.response_id, self.send_timeout)


def check_priority(body: ResponsesRequest, floor: int) -> None:
    """A 400 for a priority more urgent than this server lets clients ask for."""
    if body.priority is not None and body.priority < floor:
        raise APIError(400, f"Invalid value for 'priority': this server allows {floor} "
                       "at the most urgent (lower runs first; SPATE_PRIORITY_FLOOR).",
                       param="priority", code="invalid_value")


def stateful_store(request: Request, body: ResponsesRequest) -> Store | None:
    """The store this request uses, or None; a 400 for a stateful field it cannot have."""
    store = store_or_none(request)
    wanted = [name for name, value in (
        ("background", body.background), ("previous_response_id", body.previous_response_id),
        ("conversation", body.conversation)) if value]
    if store is None:
        for name in wanted:
            require_store_for_field(request, name)
        return None
    if body.background and body.store is False:
        raise APIError(400, "'background' needs 'store' to be true: a background response "
                       "is read back from the store.", param="background", code="invalid_value")
    return store


async def response_id_for(store: Store | None, body: ResponsesRequest) -> str:
    """A new response id, or the client's `request_id` unless the store already holds a
    response by it (one whose log has aged out of NATS); the log itself is claimed
    atomically when the request is published (a 409 for the loser)."""
    if body.request_id is None:
        return new_response_id()
    if store is not None and await store.get_response(body.request_id) is not None:
        raise request_id_taken(body.request_id)
    return body.request_id


async def check_model(journal: Journal, body: ResponsesRequest) -> ModelCard:
    card = await journal.registry.card(body.model)
    if card is None:
        raise APIError(404, f"The model '{body.model}' does not exist.", param="model",
                       code="model_not_found")
    if body.thinking_token_budget is not None and not card.supports_reasoning:
        raise APIError(
            400,
            f"The model '{body.model}' has no reasoning markers, so 'thinking_token_budget' cannot apply.",
            param="thinking_token_budget", code="invalid_value",
        )
    if not await journal.registry.is_live(body.model):
        raise APIError(503, f"No worker is serving the model '{body.model}' right now.",
                       param="model", code="model_unavailable")
    return card


async def fold_events(
    events: LogFollower, state: ResponseFold, journal: Journal, idle: float = 1.0,
    timer: ResponseTimer | None = None,
) -> AsyncIterator[list[dict[str, Any]]]:
    """Yield each batch of SSE events the fold produces, until the response is done.

    A lost bus, or a request whose model lost its last worker, becomes a
    generation.failed, so clients see `error` and `response.failed`, never a hang.
    `timer`, when given, sees each step's tokens and the end.
    """
    loop = asyncio.get_running_loop()
    last_event_at = loop.time()
    while not state.done:
        try:
            event = await events.next(timeout=idle)
            if event is None and state.request is not None and journal.connected:
                failure = await orphaned(state, journal, loop.time() - last_event_at)
                if failure is not None:
                    yield state.apply(failure)
                    return
        except JournalUnavailable as error:
            yield state.apply(local_failure(state, "bus_unavailable", str(error)))
            return
        if event is None:
            yield []
            continue
        last_event_at = loop.time()
        if timer is not None and type(event) is TokensGenerated:
            timer.tokens(len(event.token_ids), last_event_at)
        produced = state.apply(event)
        if produced:
            yield produced
    if timer is not None:
        timer.finish()


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


def server_sent_event(sse: dict[str, Any]) -> ServerSentEvent:
    """One SSE event as it goes on the wire; a replayed log renders through this too."""
    return ServerSentEvent(
        data=json.dumps(sse, separators=(",", ":")), event=sse["type"],
        id=str(sse["sequence_number"]),
    )


def stream_end() -> ServerSentEvent:
    """What follows a stream's terminal event: the Open Responses specification ends a
    stream with a literal `data: [DONE]` (the SDKs stop reading at it)."""
    return ServerSentEvent(data="[DONE]")


# Applied to each SSE event and to the Response before they go out: adds what only the API
# process can (api/encrypted_content.py seals reasoning items).
Outgoing = Callable[[dict[str, Any]], dict[str, Any]]


async def sse_stream(
    events: LogFollower, journal: Journal, admission: Admission, response_id: str,
    cancel_on_disconnect: bool = True, timer: ResponseTimer | None = None,
    drain: Drain | None = None, outgoing: Outgoing | None = None,
) -> AsyncIterator[ServerSentEvent]:
    state = ResponseFold()
    drain = drain or Drain(0)
    cut = False
    try:
        with drain.track():
            async for batch in fold_events(events, state, journal, timer=timer):
                for sse in batch:
                    yield server_sent_event(outgoing(sse) if outgoing else sse)
                    if sse["type"] in TERMINAL_SSE_TYPES:
                        yield stream_end()
                if drain.cut.is_set() and not state.done:
                    cut = True
                    notice = cut_notice(state, response_id)
                    # No SSE id: a client resuming by Last-Event-ID resumes after the
                    # last event of the log it got, not after this notice.
                    yield ServerSentEvent(data=json.dumps(notice, separators=(",", ":")),
                                          event="error")
                    return
    finally:
        admission.release()
        await events.close()
        if not state.done and cancel_on_disconnect and not cut:
            journal.cancel_soon(response_id, "client_disconnected")


def cut_notice(state: ResponseFold, response_id: str) -> dict[str, Any]:
    """The last event of a stream cut by a shutdown: an `error` the SDK knows, naming the
    event to resume after. The response itself goes on in its worker."""
    return cut_notice_after(len(state.sse_events) - 1, response_id)


def cut_notice_after(last: int, response_id: str) -> dict[str, Any]:
    """`cut_notice` for a stream whose last event sent was number `last`."""
    return {
        "type": "error", "code": SHUTTING_DOWN, "param": None, "sequence_number": last + 1,
        "message": (f"The server is shutting down, so this stream was cut after event {last}; "
                    f"the response goes on. Resume it with GET /v1/responses/{response_id}"
                    f"?stream=true&starting_after={last} (with the response store on)."),
    }


async def json_reply(
    request: Request, events: LogFollower, journal: Journal, admission: Admission, response_id: str,
    timer: ResponseTimer | None = None, drain: Drain | None = None,
    outgoing: Outgoing | None = None,
) -> JSONResponse:
    state = ResponseFold()
    drain = drain or Drain(0)
    try:
        with drain.track():
            async for _ in fold_events(events, state, journal, timer=timer):
                if not state.done and drain.cut.is_set():
                    raise APIError(
                        503, f"The server is shutting down; the response {response_id} goes "
                        f"on: read it with GET /v1/responses/{response_id} (with the response "
                        "store on).", code=SHUTTING_DOWN)
                if not state.done and await request.is_disconnected():
                    journal.cancel_soon(response_id, "client_disconnected")
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
    return JSONResponse(outgoing(response) if outgoing else response)
