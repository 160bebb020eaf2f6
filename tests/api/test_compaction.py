"""Compaction's pure parts: which turns are kept verbatim, and how a compaction item is
sealed, opened and placed in the prompt."""

from __future__ import annotations

import pytest

from api.errors import APIError
from api.lowering.compaction import (
    KEEP_CHARS,
    SUMMARY_HEADER,
    expanded_compactions,
    kept_whole,
    seal_compaction,
    split_for_compaction,
)
from api.lowering.encrypted_content import ContentKeys, new_key
from api.schema.input_items import FunctionCallItem, FunctionCallOutputItem, MessageItem
from api.schema.request import ResponsesRequest


def user(text: str) -> MessageItem:
    return MessageItem(role="user", content=text)


def assistant(text: str) -> MessageItem:
    return MessageItem(role="assistant", content=text)


def test_the_last_user_message_and_what_follows_it_are_kept() -> None:
    items = [user("a"), assistant("b"), user("c"), assistant("d"), user("e")]
    instructions, head, kept = split_for_compaction(items)
    assert instructions == [] and head == items[:4] and kept == [items[4]]


def test_instructions_stay_out_of_the_summary() -> None:
    rules = MessageItem(role="developer", content="Answer in French.")
    items = [rules, user("a"), assistant("b"), user("c")]
    instructions, head, kept = split_for_compaction(items)
    assert instructions == [rules] and head == items[1:3] and kept == [items[3]]


def test_a_long_agent_loop_keeps_the_user_message_and_its_latest_steps() -> None:
    call = FunctionCallItem(type="function_call", call_id="c1", name="f", arguments="{}")
    output = FunctionCallOutputItem(type="function_call_output", call_id="c1",
                                    output="x" * (KEEP_CHARS // 2))
    steps = [call, output] * 6
    items = [user("old"), assistant("ok"), user("do the task"), *steps, assistant("done?")]
    _, head, kept = split_for_compaction(items)
    assert kept[0] == items[2]  # the request itself survives verbatim
    assert not isinstance(kept[1], FunctionCallOutputItem)  # never an output without its call
    assert len(head) + len(kept) == len(items)
    assert head[:2] == items[:2] and items[-1] in kept


def test_a_lone_turn_leaves_nothing_to_compact() -> None:
    _, head, kept = split_for_compaction([user("only")])
    assert head == [] and len(kept) == 1


def test_a_lone_turn_compacts_into_an_item_that_opens_into_it_alone() -> None:
    rules = MessageItem(role="developer", content="rules")
    keys = ContentKeys([new_key()])
    compacted = kept_whole([rules, user("only")], "o", "m", keys)
    assert compacted.instructions == [rules]
    assert (compacted.input_tokens, compacted.output_tokens) == (0, 0)
    assert "only" not in compacted.item["encrypted_content"]
    opened = expanded_compactions(ResponsesRequest.model_validate(
        {"model": "m", "input": [compacted.item]}), keys, "o")
    assert [(entry.role, entry.text()) for entry in opened.input] == [("user", "only")]
    with pytest.raises(ValueError):  # a longer conversation is summarized, not kept whole
        kept_whole([user("a"), assistant("b"), user("c")], "o", "m", keys)


def request_with(item: dict[str, object]) -> ResponsesRequest:
    return ResponsesRequest.model_validate({"model": "m", "input": [
        {"role": "developer", "content": "rules"}, {"role": "user", "content": "old turn"},
        item, {"role": "user", "content": "next"}]})


KEPT = [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "kept"}]}]


def test_a_sealed_compaction_opens_for_its_owner_and_model_only() -> None:
    keys = ContentKeys([new_key()])
    item = seal_compaction("the user is Ada", KEPT, "owner-a", "m", keys)
    assert item["type"] == "compaction" and "Ada" not in item["encrypted_content"]
    opened = expanded_compactions(request_with(item), keys, "owner-a")
    # The turn before the item is dropped (it stands for it); the instructions stay.
    texts = [(entry.role, entry.content if isinstance(entry.content, str)
              else entry.content[0].text) for entry in opened.input]
    assert texts == [("developer", "rules"), ("developer", SUMMARY_HEADER + "the user is Ada"),
                     ("user", "kept"), ("user", "next")]
    with pytest.raises(APIError) as refused:
        expanded_compactions(request_with(item), keys, "owner-b")
    assert refused.value.status == 400
    assert refused.value.param == "input[2].encrypted_content"


def test_without_a_key_the_summary_travels_unsealed_and_marked() -> None:
    item = seal_compaction("plain", [], "o", "m", ContentKeys([]))
    assert item["encrypted_content"].startswith("spate0.")
    opened = expanded_compactions(request_with(item), ContentKeys([]), "o")
    assert opened.input[1].content == SUMMARY_HEADER + "plain"


def test_a_tampered_compaction_is_a_400() -> None:
    keys = ContentKeys([new_key()])
    item = seal_compaction("secret", KEPT, "o", "m", keys)
    token = item["encrypted_content"]
    item["encrypted_content"] = token[:-4] + ("AAAA" if token[-4:] != "AAAA" else "BBBB")
    with pytest.raises(APIError):
        expanded_compactions(request_with(item), keys, "o")
