"""End to end through the running stack with the official SDK in strict mode."""

from __future__ import annotations

from typing import Any

import pytest
from openai import OpenAI

from events import TERMINAL_SSE_TYPES
from tests.conftest import DEFAULT_MODEL, Stack


@pytest.fixture(scope="module")
def client(stack: Stack) -> OpenAI:
    return OpenAI(base_url=f"{stack.base_url}/v1", api_key="unused",
                  _strict_response_validation=True, timeout=300)


def check_stream_invariants(events: list[Any]) -> Any:
    """The SSE contract of SPEC.md; returns the terminal event's Response."""
    numbers = [event.sequence_number for event in events]
    assert numbers == list(range(len(numbers)))
    assert [events[0].type, events[1].type] == ["response.created", "response.in_progress"]
    assert events[-1].type in TERMINAL_SSE_TYPES
    assert sum(event.type in TERMINAL_SSE_TYPES for event in events) == 1
    for event in events[:-1]:
        response = getattr(event, "response", None)
        assert response is None or response.usage is None, event.type
    final = events[-1].response
    assert final.usage is not None

    added = {e.output_index: e.item for e in events if e.type == "response.output_item.added"}
    done = {e.output_index: e.item for e in events if e.type == "response.output_item.done"}
    assert added.keys() == done.keys()
    for index, item in added.items():
        assert done[index].id == item.id
        for event in events:
            if getattr(event, "item_id", None) == item.id:
                assert event.output_index == index

    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    reasoning = "".join(e.delta for e in events if e.type == "response.reasoning_text.delta")
    assert text == final.output_text
    final_reasoning = "".join(
        part.text for item in final.output if item.type == "reasoning" for part in item.content or []
    )
    assert reasoning == final_reasoning
    return final


def test_non_streaming_answers_paris(client: OpenAI) -> None:
    response = client.responses.create(
        model=DEFAULT_MODEL, input="What is the capital of France?",
        temperature=0, max_output_tokens=48,
    )
    assert response.status in ("completed", "incomplete")
    assert "Paris" in response.output_text
    assert response.usage is not None and response.usage.output_tokens > 0
    assert response.temperature == 0


def test_create_stream_true(client: OpenAI) -> None:
    events = list(client.responses.create(
        model=DEFAULT_MODEL, input="Say hello", stream=True,
        temperature=0, max_output_tokens=24, metadata={"case": "stream"},
    ))
    final = check_stream_invariants(events)
    assert final.metadata == {"case": "stream"}
    assert final.output_text


def test_stream_helper_final_response(client: OpenAI) -> None:
    with client.responses.stream(
        model=DEFAULT_MODEL, input="What is the capital of France?",
        temperature=0, max_output_tokens=48,
    ) as stream:
        events = list(stream)
        final = stream.get_final_response()
    check_stream_invariants(events)
    assert "Paris" in final.output_text


def test_max_output_tokens_gives_incomplete(client: OpenAI) -> None:
    events = list(client.responses.create(
        model=DEFAULT_MODEL, input="Write a long story about a dragon.", stream=True,
        temperature=0, max_output_tokens=5,
    ))
    final = check_stream_invariants(events)
    assert events[-1].type == "response.incomplete"
    assert final.status == "incomplete"
    assert final.incomplete_details.reason == "max_output_tokens"
    assert final.usage.output_tokens == 5


def test_reasoning_with_a_budget_streams_a_reasoning_item(client: OpenAI) -> None:
    events = list(client.responses.create(
        model=DEFAULT_MODEL, input="What is 2 + 2?", stream=True, temperature=0,
        max_output_tokens=40, reasoning={"effort": "medium"},
        extra_body={"thinking_token_budget": 5},
    ))
    final = check_stream_invariants(events)
    kinds = [item.type for item in final.output]
    assert kinds[0] == "reasoning"
    assert final.usage.output_tokens_details.reasoning_tokens == 5
