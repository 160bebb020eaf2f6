"""Compaction through real processes (nats-server, the API, a worker with the default
model): `POST /v1/responses/compact`, and a session driven past the model's context that
keeps answering with `context_management`."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import openai

from api.lowering.compaction import SUMMARY_HEADER
from tests.conformance.open_responses import compaction_errors
from tests.conftest import DEFAULT_MODEL, Stack
from tests.e2e.test_queue_consumer import read_requests

FACT = "The launch code word is PELICAN."


def filler(turn: int, words: int) -> str:
    return f"Note {turn}: " + " ".join(f"harbour{turn}x{index}" for index in range(words))


def session(turns: int, words: int) -> list[dict[str, Any]]:
    """A chat of `turns` long user turns and short answers, the fact in the first."""
    items: list[dict[str, Any]] = [{"role": "user", "content": FACT},
                                   {"role": "assistant", "content": "Noted."}]
    for turn in range(turns):
        items += [{"role": "user", "content": filler(turn, words)},
                  {"role": "assistant", "content": "Noted."}]
    return items


def post(stack: Stack, path: str, **body: Any) -> httpx.Response:
    return httpx.post(f"{stack.base_url}{path}", json={"model": DEFAULT_MODEL, **body},
                      timeout=600)


def test_compact_replaces_older_turns_with_one_item(stack: Stack) -> None:
    items = [*session(2, 40), {"role": "user", "content": "What is the code word?"}]
    reply = post(stack, "/v1/responses/compact", input=items)
    assert reply.status_code == 200, reply.text
    body = reply.json()
    assert body["object"] == "response.compaction" and body["id"].startswith("cmp_")
    (item,) = body["output"]
    assert item["type"] == "compaction" and item["encrypted_content"]
    assert "code word" not in item["encrypted_content"]
    assert body["usage"]["output_tokens"] > 0

    # The item carries the session: the model reads the summary as a developer message,
    # then the latest turn verbatim.
    again = post(stack, "/v1/responses", input=body["output"], max_output_tokens=8,
                 temperature=0, store=False)
    assert again.status_code == 200, again.text
    (event,) = asyncio.run(read_requests(stack.nats_url, {again.json()["id"]})).values()
    assert event.messages[0].role in ("developer", "system")
    assert any(message.content.startswith(SUMMARY_HEADER) for message in event.messages)
    assert event.messages[-1].content == "What is the code word?"


def test_the_sdk_reads_a_compaction(stack: Stack) -> None:
    client = openai.OpenAI(base_url=f"{stack.base_url}/v1", api_key="unused",
                           _strict_response_validation=True)
    compacted = client.responses.compact(
        model=DEFAULT_MODEL, input=[*session(1, 30), {"role": "user", "content": "Go on."}])
    assert compacted.output[0].type == "compaction"


def test_one_turn_compacts_into_an_item_holding_it(stack: Stack) -> None:
    """As the Open Responses suite expects: any non-empty conversation gets its item; one
    of a single turn holds that turn and no summary, and no model request is made."""
    lone = post(stack, "/v1/responses/compact", input="just one turn")
    assert lone.status_code == 200, lone.text
    body = lone.json()
    assert not compaction_errors(body)
    (item,) = body["output"]
    assert item["type"] == "compaction" and body["usage"]["output_tokens"] == 0
    again = post(stack, "/v1/responses", input=[item], max_output_tokens=4, temperature=0,
                 store=False)
    assert again.status_code == 200, again.text
    (event,) = asyncio.run(read_requests(stack.nats_url, {again.json()["id"]})).values()
    assert [message.content for message in event.messages if message.role != "system"] == [
        "just one turn"]


def test_an_empty_conversation_and_a_tampered_item_are_400s(stack: Stack) -> None:
    empty = post(stack, "/v1/responses/compact", input=[])
    assert empty.status_code == 400 and empty.json()["error"]["param"] == "input"
    neither = post(stack, "/v1/responses/compact")
    assert neither.status_code == 400
    forged = post(stack, "/v1/responses", input=[
        {"type": "compaction", "encrypted_content": "spate1.bm90LXNlYWxlZA"},
        {"role": "user", "content": "hi"}], max_output_tokens=2)
    assert forged.status_code == 400
    assert forged.json()["error"]["param"] == "input[0].encrypted_content"


def test_a_session_past_the_context_keeps_answering(stack: Stack) -> None:
    """About 10,000 tokens of turns against an 8k context: without context_management
    the request fails on its length; with it the older turns are compacted and the
    model answers, its output opening with the compaction item."""
    items = [*session(8, 230), {"role": "user", "content": "What is the code word?"}]
    too_long = post(stack, "/v1/responses", input=items, max_output_tokens=8, temperature=0)
    assert too_long.status_code == 400, too_long.text
    assert too_long.json()["error"]["code"] == "context_length_exceeded"

    managed = post(stack, "/v1/responses", input=items, max_output_tokens=16, temperature=0,
                   context_management=[{"type": "compaction"}])
    assert managed.status_code == 200, managed.text
    response = managed.json()
    # The answer may stop at max_output_tokens: what matters is that it was given.
    assert response["status"] in ("completed", "incomplete"), response
    assert response["error"] is None
    assert response["output"][0]["type"] == "compaction"
    assert response["output"][-1]["type"] == "message"
    assert response["usage"]["input_tokens"] < 8192


def test_below_the_threshold_nothing_is_compacted_and_the_stream_shows_the_item(
    stack: Stack,
) -> None:
    short = post(stack, "/v1/responses", input="Say hi.", max_output_tokens=4,
                 context_management=[{"type": "compaction", "compact_threshold": 5000}])
    assert short.status_code == 200, short.text
    assert all(item["type"] != "compaction" for item in short.json()["output"])

    items = [*session(3, 120), {"role": "user", "content": "Summarize my notes."}]
    kinds = []
    with httpx.stream("POST", f"{stack.base_url}/v1/responses", timeout=600, json={
        "model": DEFAULT_MODEL, "input": items, "max_output_tokens": 8, "stream": True,
        "context_management": [{"type": "compaction", "compact_threshold": 1000}],
    }) as reply:
        assert reply.status_code == 200
        for line in reply.iter_lines():
            if line.startswith("event:"):
                kinds.append(line.split(":", 1)[1].strip())
    added = kinds.index("response.output_item.added")
    assert kinds[:added] == ["response.created", "response.in_progress"]
    assert kinds[-1] in ("response.completed", "response.incomplete")
    assert "response.failed" not in kinds
