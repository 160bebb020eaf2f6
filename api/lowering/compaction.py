"""Compaction: a long session's older turns replaced by one `compaction` item, a summary
the served model writes, so the session goes on past the model's context.

Two ways in, one mechanism:
- `POST /v1/responses/compact` (api/routes/compact.py) compacts a conversation (its
  `input`, after a `previous_response_id` chain) and answers with the items to carry on
  with: the compaction item, then the latest turn verbatim;
- `context_management: [{"type": "compaction", "compact_threshold": N}]` on a create:
  when the request's input (counted by a worker, with its chat template) passes N
  tokens, the same happens before the request is published, the response's output
  starts with the compaction item (events/fold.py), and the model answers from the
  compacted input.

The summary is written by the served model itself, as ordinary requests through the
same pipeline (one request event each, owned by the caller): the turns to replace are
rendered as a transcript and read in parts that fit the context, each part folded into
the running summary. The item's `encrypted_content` is the summary sealed like
reasoning (api/lowering/encrypted_content.py, bound to the owner and the model), so it
round-trips with `store: false`; without a key it travels unsealed, marked as such. The
item also holds the turns kept verbatim (the last user message and the latest steps
after it), so it alone carries a session on: sent back in `input`, the turns before it
are dropped (system and developer messages stay), and it opens into a developer message
holding the summary, then the kept turns.

What a small model's summary keeps: names, numbers, decisions and the open task of the
turns it replaces, in a few hundred tokens; exact wording, long code and tool outputs
are lost (the latest turn is always kept verbatim). docs/api.md says so.
"""

from __future__ import annotations

import base64
import binascii
import json
import secrets
import time
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from api.errors import APIError
from api.lowering.accept import accept
from api.lowering.encrypted_content import ContentKeys
from api.lowering.stored_items import as_input, item_dicts
from api.schema.input_items import (
    CompactionItem,
    FunctionCallItem,
    FunctionCallOutputItem,
    MessageItem,
    ReasoningItem,
    TextPart,
)
from api.schema.request import ResponsesRequest
from events import ModelCard, ResponseFold, Usage
from events.ids import new_response_id
from events.response_object import usage_object
from journal import Journal, JournalUnavailable

# A summary part read at a time, in characters of transcript (about 2,000 tokens of
# English for the default model's tokenizer: with the instructions and the running
# summary, well inside an 8k context).
PART_CHARS = 8_000
# One item's text in the transcript at most; longer tool outputs are cut in the middle.
ITEM_CHARS = 3_000
# The summary's length, in tokens, per part.
SUMMARY_TOKENS = 256
# How long one summary request may take before the compaction fails (504).
SUMMARY_TIMEOUT_S = 300.0
# The latest turns kept verbatim, in characters at most (besides the last user message).
KEEP_CHARS = 6_000
SUMMARY_HEADER = "Summary of the earlier conversation (compacted):\n"
_UNSEALED = "spate0."
_INSTRUCTIONS = (
    "You maintain a running summary of a conversation between a user and an assistant. "
    "Rewrite the summary so it also covers the new part. Keep names, numbers, file names, "
    "decisions, results of tool calls and what is still to be done. Be brief and factual; "
    "write only the summary."
)


@dataclass(frozen=True, slots=True)
class Compacted:
    """A conversation compacted: the item that replaces its turns, the instructions
    (system and developer messages) that stay in place before it, and the tokens the
    summary requests used."""

    item: dict[str, Any]
    instructions: list[Any]
    input_tokens: int
    output_tokens: int


def split_for_compaction(items: list[Any]) -> tuple[list[Any], list[Any], list[Any]]:
    """(the instructions, the turns to summarize, the turns kept verbatim): kept are the
    last user message and the latest items after it that fit KEEP_CHARS, never starting
    at a tool call's output (its call would be summarized away). System and developer
    messages are instructions, not turns; an earlier summary is a turn."""
    instructions = [item for item in items if _is_instruction(item)]
    items = [item for item in items if not _is_instruction(item)]
    last_user = max((index for index, item in enumerate(items)
                     if isinstance(item, MessageItem) and item.role == "user"), default=None)
    floor = 0 if last_user is None else last_user + 1
    start, used = len(items), 0
    while start > floor and used + len(_item_text(items[start - 1])) <= KEEP_CHARS:
        used += len(_item_text(items[start - 1]))
        start -= 1
    while start < len(items) and isinstance(items[start], FunctionCallOutputItem):
        start += 1
    if last_user is None:
        return instructions, items[:start], items[start:]
    if start == floor:
        return instructions, items[:last_user], items[last_user:]
    return (instructions, [*items[:last_user], *items[floor:start]],
            [items[last_user], *items[start:]])


async def compact(
    journal: Journal, body: ResponsesRequest, items: list[Any], card: ModelCard, owner: str,
    keys: ContentKeys,
) -> Compacted | None:
    """`items` (the conversation so far, compaction items opened) compacted; None when
    there is nothing older than the turns kept verbatim."""
    instructions, head, kept = split_for_compaction(items)
    if not head:
        return None  # nothing a summary would replace: `kept_whole` when an item is asked for
    summary = ""
    input_tokens = output_tokens = 0
    for part in _transcript_parts(head):
        summary, used_in, used_out = await _summarized(journal, body, card, owner, summary, part)
        input_tokens += used_in
        output_tokens += used_out
    item = seal_compaction(summary, item_dicts(kept), owner, body.model, keys)
    return Compacted(item, instructions, input_tokens, output_tokens)


def kept_whole(items: list[Any], owner: str, model: str, keys: ContentKeys) -> Compacted:
    """A conversation with nothing older than the turns kept verbatim (one turn, say)
    compacted all the same, as `POST /v1/responses/compact` does for any input: an item
    with no summary that holds those turns, so a client carries on from the item whatever
    the conversation's length. No model request is made."""
    instructions, head, kept = split_for_compaction(items)
    if head:
        raise ValueError("kept_whole is for a conversation with nothing to summarize")
    return Compacted(seal_compaction("", item_dicts(kept), owner, model, keys), instructions, 0, 0)


def seal_compaction(summary: str, kept: list[dict[str, Any]], owner: str, model: str,
                    keys: ContentKeys) -> dict[str, Any]:
    """The compaction item: the summary and the turns kept verbatim, sealed."""
    text = json.dumps({"summary": summary, "items": kept})
    if keys.enabled:
        content = keys.seal(text, owner, model, purpose="compaction")
    else:
        content = _UNSEALED + base64.urlsafe_b64encode(text.encode()).decode()
    return {"type": "compaction", "id": _new_id("cmp"), "encrypted_content": content}


def open_compaction(item: CompactionItem, owner: str, model: str, keys: ContentKeys,
                    param: str) -> list[Any]:
    """The input items a compaction item stands for: its summary as a developer message,
    then the turns it kept; a 400 naming it when it does not open."""
    token = item.encrypted_content
    try:
        if token.startswith(_UNSEALED):
            text = base64.urlsafe_b64decode(token[len(_UNSEALED):]).decode()
        else:
            text = keys.open(token, owner, model, purpose="compaction")
        opened = json.loads(text)
        kept = as_input(list(opened["items"]))
        if not opened["summary"]:
            return kept  # an item of a conversation too short to summarize (`kept_whole`)
        summary = MessageItem(role="developer", content=SUMMARY_HEADER + str(opened["summary"]))
        return [summary, *kept]
    except (ValueError, TypeError, KeyError, binascii.Error, UnicodeDecodeError,
            ValidationError) as error:
        raise APIError(400, f"The encrypted_content of {param} cannot be opened: {error}.",
                       param=f"{param}.encrypted_content",
                       code="invalid_encrypted_content") from None


def expanded_compactions(
    request: ResponsesRequest, keys: ContentKeys, owner: str
) -> ResponsesRequest:
    """The request as the model reads it: the turns before its last compaction item
    dropped (the item stands for them; instructions stay), and each compaction item
    opened into its summary and kept turns."""
    if isinstance(request.input, str) or not any(
        isinstance(item, CompactionItem) for item in request.input
    ):
        return request
    last = max(index for index, item in enumerate(request.input)
               if isinstance(item, CompactionItem))
    items: list[Any] = []
    for index, item in enumerate(request.input):
        if index < last and not _is_instruction(item):
            continue
        if isinstance(item, CompactionItem):
            items.extend(open_compaction(item, owner, request.model, keys, f"input[{index}]"))
        else:
            items.append(item)
    return request.model_copy(update={"input": items})


def compaction_threshold(request: ResponsesRequest) -> int | None:
    """The token count past which `context_management` asks to compact, if it does."""
    for entry in request.context_management or []:
        if entry.type == "compaction":
            return entry.compact_threshold
    return None


def compacted_response(compacted: Compacted, created_at: float | None = None) -> dict[str, Any]:
    """The body of `POST /v1/responses/compact`: the compaction item alone (it holds the
    kept turns; the instructions are the client's to send again, as with every request)."""
    return {
        "id": _new_id("cmp"),
        "object": "response.compaction",
        "created_at": int(created_at if created_at is not None else time.time()),
        "output": [compacted.item],
        "usage": usage_object(Usage(input_tokens=compacted.input_tokens,
                                    output_tokens=compacted.output_tokens)),
    }


# -- the summary requests --------------------------------------------------------------


async def _summarized(
    journal: Journal, body: ResponsesRequest, card: ModelCard, owner: str, summary: str,
    part: str,
) -> tuple[str, int, int]:
    """The running summary with `part` folded in, and the tokens that took."""
    prompt = (f"Summary so far:\n{summary or '(nothing yet)'}\n\nNew part of the "
              f"conversation:\n{part}\n\nWrite the updated summary.")
    request = ResponsesRequest.model_validate({
        "model": body.model, "instructions": _INSTRUCTIONS, "input": prompt,
        "max_output_tokens": SUMMARY_TOKENS, "temperature": 0, "store": False,
        "truncation": "auto", "prompt_cache_key": body.prompt_cache_key,
    })
    event = accept(request, new_response_id(), card.default_sampling, owner=owner)
    fold = ResponseFold()
    follower = await journal.follow(event.response_id)
    try:
        await journal.publish_request(event)
        deadline = time.monotonic() + SUMMARY_TIMEOUT_S
        while not fold.done:
            if time.monotonic() > deadline:
                journal.cancel_soon(event.response_id, "requested")
                raise APIError(504, "Compaction timed out while the model summarized the "
                               "conversation.", code="compaction_failed")
            next_event = await follower.next(timeout=1.0)
            if next_event is not None:
                fold.apply(next_event)
    except JournalUnavailable:
        raise APIError(503, "The message bus is unavailable, so the conversation could not "
                       "be compacted.", code="bus_unavailable") from None
    finally:
        await follower.close()
    response = fold.response()
    if response["status"] == "failed":
        error = response.get("error") or {}
        raise APIError(500, "Compaction failed while the model summarized the conversation: "
                       f"{error.get('message', 'no reason given')}", code="compaction_failed")
    text = "".join(part.get("text", "") for item in response["output"]
                   if item.get("type") == "message" for part in item.get("content", []))
    usage = response.get("usage") or {}
    return text.strip(), int(usage.get("input_tokens", 0)), int(usage.get("output_tokens", 0))


def _transcript_parts(items: list[Any]) -> list[str]:
    """The items as transcript lines, grouped into parts of at most PART_CHARS."""
    parts: list[str] = []
    current = ""
    for item in items:
        line = _item_text(item)
        if not line:
            continue
        if current and len(current) + len(line) + 1 > PART_CHARS:
            parts.append(current)
            current = ""
        current = f"{current}\n{line}" if current else line
    if current:
        parts.append(current)
    return parts


def _is_instruction(item: Any) -> bool:
    if not isinstance(item, MessageItem) or item.role not in ("system", "developer"):
        return False
    return not _message_text(item).startswith(SUMMARY_HEADER)


def _message_text(item: MessageItem) -> str:
    if isinstance(item.content, str):
        return item.content
    return "\n".join(part.text for part in item.content if isinstance(part, TextPart))


def _item_text(item: Any) -> str:
    if isinstance(item, MessageItem):
        return _cut(f"{item.role}: {_message_text(item)}")
    if isinstance(item, FunctionCallItem):
        return _cut(f"assistant called {item.name}({item.arguments})")
    if isinstance(item, FunctionCallOutputItem):
        return _cut(f"tool result ({item.call_id}): {item.text()}")
    if isinstance(item, ReasoningItem):
        return ""  # the reasoning led to the turns kept; the summary keeps its results
    if isinstance(item, CompactionItem):
        return ""  # opened into a developer message before this point
    dumped = item.model_dump(exclude_none=True) if hasattr(item, "model_dump") else item
    return _cut(f"{getattr(item, 'type', 'item')}: {json.dumps(dumped)}")


def _new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(12)}"


def _cut(text: str) -> str:
    if len(text) <= ITEM_CHARS:
        return text
    half = ITEM_CHARS // 2
    return f"{text[:half]} [...] {text[-half:]}"
