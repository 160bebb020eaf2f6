"""Stored responses (store on): retrieve, resume a stream from any replica, delete,
cancel and list input items. With the store off every id is a 404 that says why."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Header, Query, Request
from fastapi.responses import JSONResponse

from api.deps import AdmissionDep, DrainDep, JournalDep, OwnerDep, SettingsDep, require_api_key
from api.errors import APIError, response_not_found
from api.lowering.accept import LOGPROBS_INCLUDE
from api.schema.request import INCLUDABLE
from api.state import require_store_for_id
from api.streaming import resumed_sse_reply
from events import TERMINAL_STATUSES
from store import Store, StoredResponse

router = APIRouter(dependencies=[Depends(require_api_key)])

# How long a cancel waits for the worker to write the cancelled end of the log.
CANCEL_WAIT_S = 5.0


async def stored(store: Store, response_id: str, owner: str) -> StoredResponse:
    found = await store.get_response(response_id)
    if found is None or found.owner != owner:
        raise response_not_found(response_id)
    return found


def shown(found: StoredResponse) -> dict[str, Any]:
    """The Response as the client sees it: a cancel mark wins over a late status."""
    if found.cancelled and found.status not in TERMINAL_STATUSES:
        return {**found.response, "status": "cancelled"}
    return found.response


def included(response: dict[str, Any], include: list[str]) -> dict[str, Any]:
    """`include[]` as on create: message logprobs only when asked for."""
    if LOGPROBS_INCLUDE in include:
        return response
    output = [
        {**item, "content": [{**part, "logprobs": []} if part.get("type") == "output_text"
                             else part for part in item.get("content", [])]}
        if item.get("type") == "message" else item
        for item in response.get("output", [])
    ]
    return {**response, "output": output}


@router.get("/v1/responses/{response_id}")
async def retrieve(
    request: Request, response_id: str, owner: OwnerDep, settings: SettingsDep, drain: DrainDep,
    admission: AdmissionDep, stream: bool = False,
    starting_after: int | None = Query(default=None, ge=-1),
    include: Annotated[list[str] | None, Query(alias="include[]")] = None,
    last_event_id: Annotated[str | None, Header(alias="Last-Event-ID")] = None,
) -> Any:
    store = require_store_for_id(request, response_id)
    for entry in include or []:
        if entry not in INCLUDABLE:
            raise APIError(400, f"'{entry}' cannot be included; supported: {', '.join(INCLUDABLE)}",
                           param="include", code="invalid_value")
    found = await stored(store, response_id, owner)
    if not stream:
        return JSONResponse(included(shown(found), include or []))
    after = starting_after
    if after is None and last_event_id is not None and last_event_id.strip().lstrip("-").isdigit():
        after = int(last_event_id)
    # Refused before the status line (429); held until the stream ends.
    slot = admission.admit_resume(owner)
    return resumed_sse_reply(store, response_id, -1 if after is None else after, drain, settings,
                             slot)


@router.delete("/v1/responses/{response_id}")
async def delete(
    request: Request, response_id: str, owner: OwnerDep, journal: JournalDep
) -> dict[str, Any]:
    store = require_store_for_id(request, response_id)
    found = await stored(store, response_id, owner)
    if found.status not in TERMINAL_STATUSES:
        await store.mark_cancelled(response_id)
        await journal.cancel(response_id, "requested")
    await store.delete_response(response_id)
    return {"id": response_id, "object": "response.deleted", "deleted": True}


@router.post("/v1/responses/{response_id}/cancel")
async def cancel(
    request: Request, response_id: str, owner: OwnerDep, journal: JournalDep
) -> JSONResponse:
    store = require_store_for_id(request, response_id)
    found = await stored(store, response_id, owner)
    if found.status in TERMINAL_STATUSES:
        if found.status == "cancelled" or found.cancelled:
            return JSONResponse(shown(found))  # cancelling twice changes nothing
        raise APIError(400, "Cannot cancel a synchronous response.", param="response_id",
                       code="invalid_value")
    await store.mark_cancelled(response_id)
    await journal.cancel(response_id, "requested")
    deadline = asyncio.get_running_loop().time() + CANCEL_WAIT_S
    while found.status not in TERMINAL_STATUSES and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.05)
        found = await stored(store, response_id, owner)
    return JSONResponse(shown(found))


@router.get("/v1/responses/{response_id}/input_items")
async def input_items(
    request: Request, response_id: str, owner: OwnerDep,
    after: str | None = None, before: str | None = None,
    limit: int = Query(default=20, ge=1, le=100),
    order: Literal["asc", "desc"] = "desc",
    include: Annotated[list[str] | None, Query(alias="include[]")] = None,
) -> dict[str, Any]:
    store = require_store_for_id(request, response_id)
    await stored(store, response_id, owner)
    try:
        page = await store.input_items(response_id, after=after, before=before, limit=limit,
                                       order=order)
    except KeyError:
        cursor, param = (after, "after") if after is not None else (before, "before")
        raise APIError(400, f"No input item with id '{cursor}' in this response.",
                       param=param, code="invalid_value") from None
    if page is None:
        raise response_not_found(response_id)
    return page.list_object()
