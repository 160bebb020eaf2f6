"""Every Response and streamed event the fold writes validates against the Open Responses
schema: text, reasoning, function calls, and each way a response ends."""

from __future__ import annotations

from typing import Any

import pytest

from api.lowering.accept import accept
from api.schema.request import ResponsesRequest
from events import (
    GenerationFailed,
    GenerationFinished,
    GenerationStarted,
    ReasoningEnded,
    TokensGenerated,
    ToolCallEnded,
    ToolCallStarted,
    Usage,
    fold,
)
from tests.conformance.open_responses import event_errors, event_schemas, response_errors

WEATHER_TOOL = {"type": "function", "name": "get_weather", "description": "Weather for a city",
                "parameters": {"type": "object", "properties": {"location": {"type": "string"}},
                               "required": ["location"]}}


def request(**fields: Any) -> Any:
    body = ResponsesRequest.model_validate({"model": "m", "input": "Hi", **fields})
    return accept(body, "resp_1", owner="shared")


def log(body: Any, *rest: Any) -> list[Any]:
    return [body, *(event.model_copy(update={"response_id": "resp_1", "seq": seq})
                    for seq, event in enumerate(rest, start=1))]


def started() -> GenerationStarted:
    return GenerationStarted(response_id="r", seq=0, worker_id="w", input_tokens=3)


def tokens(channel: str, text: str) -> TokensGenerated:
    return TokensGenerated(response_id="r", seq=0, channel=channel, text=text)  # type: ignore[arg-type]


def finished(reason: str = "stop") -> GenerationFinished:
    return GenerationFinished(response_id="r", seq=0, finish_reason=reason,  # type: ignore[arg-type]
                              usage=Usage(input_tokens=3, output_tokens=4, reasoning_tokens=1))


LOGS = {
    "text": lambda: log(request(), started(), tokens("text", "Hel"), tokens("text", "lo"),
                        finished()),
    "every echoed field": lambda: log(
        request(instructions="Be brief.", metadata={"k": "v"}, user="u", max_output_tokens=9,
                max_tool_calls=2, top_logprobs=2, truncation="auto", prompt_cache_key="p",
                safety_identifier="s", service_tier="auto", temperature=0.5, top_p=0.9,
                presence_penalty=0.1, frequency_penalty=0.2, parallel_tool_calls=False,
                reasoning={"effort": "low", "summary": "auto"},
                text={"format": {"type": "json_object"}},
                include=["message.output_text.logprobs"]),
        started(), tokens("text", "{}"), finished()),
    "reasoning": lambda: log(request(reasoning={"effort": "high"}), started(),
                             tokens("reasoning", "hmm"), ReasoningEnded(
                                 response_id="r", seq=0, cause="budget", reasoning_tokens=1),
                             tokens("text", "ok"), finished()),
    "function call": lambda: log(
        request(tools=[WEATHER_TOOL], tool_choice="required"), started(),
        ToolCallStarted(response_id="r", seq=0, call_id="call_1", name="get_weather"),
        tokens("tool_call", '{"location":'), tokens("tool_call", '"Paris"}'),
        ToolCallEnded(response_id="r", seq=0, call_id="call_1", arguments='{"location":"Paris"}'),
        finished()),
    "incomplete": lambda: log(request(max_output_tokens=1), started(), tokens("text", "a"),
                              finished("length")),
    "cancelled": lambda: log(request(), started(), tokens("text", "a"), finished("cancelled")),
    "failed": lambda: log(request(), started(), tokens("text", "a"), GenerationFailed(
        response_id="r", seq=0, code="worker_lost", message="gone")),
}


@pytest.mark.parametrize("case", sorted(LOGS))
def test_every_event_and_response_validates(case: str) -> None:
    state = fold(LOGS[case]())
    failures = {f"{event['sequence_number']} {event['type']}": errors
                for event in state.sse_events if (errors := event_errors(event))}
    assert not failures
    assert not response_errors(state.response())


def test_the_vendored_schema_lists_every_event_spate_streams() -> None:
    streamed = {event["type"] for case in LOGS.values() for event in fold(case()).sse_events}
    assert not {kind for kind in streamed if event_errors({"type": kind}) ==
                [f"the specification has no streamed event of type {kind!r}"]}
    assert "response.completed" in event_schemas()
