"""POST /v1/responses/compact: a conversation (its `input`, after a
`previous_response_id` chain) compacted into a compaction item and its latest turn
(api/compaction.py)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request
from pydantic import Field

from api.body import read_body
from api.compaction import compact, compacted_response
from api.deps import ContentKeysDep, JournalDep, OwnerDep, SettingsDep, require_api_key
from api.errors import APIError
from api.input_items import MessageItem, RequestInputItem
from api.model_base import StrictModel
from api.request_event import conversation_items
from api.request_model import PromptCacheOptions, ResponsesRequest

router = APIRouter(dependencies=[Depends(require_api_key)])


class CompactRequest(StrictModel):
    """The body the official SDK's `responses.compact` sends."""

    model: str = Field(min_length=1)
    input: str | list[RequestInputItem] | None = None
    instructions: str | None = None
    previous_response_id: str | None = Field(default=None, min_length=1)
    prompt_cache_key: str | None = Field(default=None, max_length=1024)
    prompt_cache_options: PromptCacheOptions | None = None
    safety_identifier: str | None = Field(default=None, max_length=128)
    image: dict[str, Any] | None = None


@router.post("/v1/responses/compact")
async def compact_conversation(
    request: Request, journal: JournalDep, settings: SettingsDep, owner: OwnerDep,
    content_keys: ContentKeysDep,
) -> dict[str, Any]:
    body = await read_body(request, CompactRequest, settings.max_body_bytes)
    if body.input is None and body.previous_response_id is None:
        raise APIError(400, "Give 'input', 'previous_response_id' or both: there is nothing "
                       "to compact.", param="input", code="missing_required_parameter")
    as_request = ResponsesRequest.model_validate({
        key: value for key, value in {
            "model": body.model, "input": body.input if body.input is not None else "",
            "instructions": body.instructions,
            "previous_response_id": body.previous_response_id,
            "prompt_cache_key": body.prompt_cache_key,
            "safety_identifier": body.safety_identifier,
        }.items() if value is not None
    })
    merged, card = await conversation_items(request, journal, settings, as_request, owner,
                                            content_keys)
    items = merged.input if isinstance(merged.input, list) else [
        MessageItem(role="user", content=merged.input)]
    if body.input is None:
        items = items[:-1]  # the empty placeholder the chain was read with
    compacted = await compact(journal, merged, list(items), card, owner, content_keys)
    if compacted is None:
        raise APIError(400, "Nothing to compact: the conversation is only its latest turn.",
                       param="input", code="invalid_value")
    return compacted_response(compacted)
