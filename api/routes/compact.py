"""POST /v1/responses/compact: a conversation (its `input`, after a
`previous_response_id` chain) compacted into a compaction item holding a summary of its
older turns and its latest turn verbatim (api/lowering/compaction.py); a conversation of one turn
gets an item holding that turn and no summary."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request
from pydantic import Field

from api.deps import ContentKeysDep, JournalDep, OwnerDep, SettingsDep, StoreDep, require_api_key
from api.errors import APIError
from api.lowering.compaction import compact, compacted_response, kept_whole
from api.lowering.request_event import conversation_items
from api.schema.body import read_body
from api.schema.input_items import MessageItem, RequestInputItem
from api.schema.model_base import StrictModel
from api.schema.request import PromptCacheOptions, ResponsesRequest
from events.request_settings import MAX_PROMPT_CACHE_KEY_CHARS, MAX_SAFETY_IDENTIFIER_CHARS

router = APIRouter(dependencies=[Depends(require_api_key)])


class CompactRequest(StrictModel):
    """The body the official SDK's `responses.compact` sends."""

    model: str = Field(min_length=1)
    input: str | list[RequestInputItem] | None = None
    instructions: str | None = None
    previous_response_id: str | None = Field(default=None, min_length=1)
    prompt_cache_key: str | None = Field(default=None, max_length=MAX_PROMPT_CACHE_KEY_CHARS)
    prompt_cache_options: PromptCacheOptions | None = None
    safety_identifier: str | None = Field(default=None, max_length=MAX_SAFETY_IDENTIFIER_CHARS)
    image: dict[str, Any] | None = None


@router.post("/v1/responses/compact")
async def compact_conversation(
    request: Request, journal: JournalDep, settings: SettingsDep, owner: OwnerDep,
    content_keys: ContentKeysDep, store: StoreDep,
) -> dict[str, Any]:
    body = await read_body(request, CompactRequest, settings.max_body_bytes)
    given = body.input or None  # an empty list or string adds nothing to the conversation
    if given is None and body.previous_response_id is None:
        raise APIError(400, "Give 'input', 'previous_response_id' or both: there is nothing "
                       "to compact.", param="input", code="missing_required_parameter")
    as_request = ResponsesRequest.model_validate({
        key: value for key, value in {
            "model": body.model, "input": given if given is not None else "",
            "instructions": body.instructions,
            "previous_response_id": body.previous_response_id,
            "prompt_cache_key": body.prompt_cache_key,
            "safety_identifier": body.safety_identifier,
        }.items() if value is not None
    })
    merged, card = await conversation_items(store, journal, settings, as_request, owner,
                                            content_keys)
    items = merged.input if isinstance(merged.input, list) else [
        MessageItem(role="user", content=merged.input)]
    if given is None:
        items = items[:-1]  # the empty placeholder the chain was read with
    if not items:
        raise APIError(400, "The conversation to compact is empty: give it in 'input' or "
                       "through 'previous_response_id'.", param="input", code="invalid_value")
    compacted = await compact(journal, merged, list(items), card, owner, content_keys)
    if compacted is None:  # only its latest turn: an item holding it, with no summary
        compacted = kept_whole(list(items), owner, merged.model, content_keys)
    return compacted_response(compacted)
