"""POST /v1/responses/input_tokens: how many input tokens a would-be request has, counted
by a worker of its model with the chat template the request would run with."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request

from api.body import read_request
from api.context import Context, context_of, resolved_references, with_context
from api.deps import ContentKeysDep, JournalDep, OwnerDep, SettingsDep, require_api_key
from api.encrypted_content import opened_reasoning
from api.errors import APIError
from api.input_files import refuse_images, with_file_text
from api.normalize import accept
from api.routes.responses import ERROR_STATUS, check_model, stateful_store
from events.ids import new_response_id
from journal import CountRefused

router = APIRouter(dependencies=[Depends(require_api_key)])


@router.post("/v1/responses/input_tokens")
async def count_input_tokens(
    request: Request, journal: JournalDep, settings: SettingsDep, owner: OwnerDep,
    content_keys: ContentKeysDep,
) -> dict[str, Any]:
    body = opened_reasoning(await read_request(request, settings.max_body_bytes), content_keys,
                            owner)
    store = stateful_store(request, body)
    body = await resolved_references(store, body, owner)
    context = await context_of(store, body, owner) if store is not None else Context()
    card = await check_model(journal, body)
    refuse_images(body, card)
    body = await with_file_text(body, settings.max_file_bytes)
    # The event a create would publish (never published): the worker renders it as it would.
    event = accept(with_context(body, context), new_response_id(), card.default_sampling,
                   owner=owner)
    try:
        count = await journal.count_input_tokens(event)
    except CountRefused as refused:
        raise APIError(ERROR_STATUS.get(refused.code, 500), refused.message,
                       param=refused.param, code=refused.code) from refused
    return {"object": "response.input_tokens", "input_tokens": count}
