"""POST /v1/responses/input_tokens: how many input tokens a would-be request has, counted
by a worker of its model with the chat template the request would run with."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request

from api.deps import ContentKeysDep, JournalDep, OwnerDep, SettingsDep, StoreDep, require_api_key
from api.errors import ERROR_STATUS, APIError
from api.lowering.request_event import would_be_event
from api.schema.body import read_request
from journal import CountRefused

router = APIRouter(dependencies=[Depends(require_api_key)])


@router.post("/v1/responses/input_tokens")
async def count_input_tokens(
    request: Request, journal: JournalDep, settings: SettingsDep, owner: OwnerDep,
    content_keys: ContentKeysDep, store: StoreDep,
) -> dict[str, Any]:
    body = await read_request(request, settings.max_body_bytes)
    event = await would_be_event(store, journal, settings, body, owner, content_keys)
    try:
        count = await journal.count_input_tokens(event)
    except CountRefused as refused:
        raise APIError(ERROR_STATUS.get(refused.code, 500), refused.message,
                       param=refused.param, code=refused.code) from refused
    return {"object": "response.input_tokens", "input_tokens": count}
