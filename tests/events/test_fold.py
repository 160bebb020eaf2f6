"""Given these events, then these SSE events and this Response."""

from __future__ import annotations

from typing import Literal, get_args

import pytest

from events import (
    AnyEvent,
    CancelRequested,
    ChatMessage,
    Event,
    GenerationFailed,
    GenerationFinished,
    GenerationStarted,
    ReasoningEnded,
    RequestAccepted,
    ResponseFold,
    SamplingSettings,
    TokensGenerated,
    Usage,
    decode,
    encode,
    fold,
)
from events.fold import LOG_EVENT_TYPES, UnknownEventType

RID = "resp_abc"


def accepted(**echo: object) -> RequestAccepted:
    return RequestAccepted(
        response_id=RID, seq=0, model="m", created_at=1000.0,
        messages=(ChatMessage(role="user", content="hi"),),
        sampling=SamplingSettings(temperature=0.0, max_output_tokens=4),
        echo={"metadata": {"k": "v"}, **echo},
    )


def log_of(*body: object) -> list[object]:
    """Number the events 0, 1, 2, ... as a worker would."""
    events: list[object] = [accepted()]
    for seq, event in enumerate(body, start=1):
        events.append(event.model_copy(update={"seq": seq}))  # type: ignore[attr-defined]
    return events


def started() -> GenerationStarted:
    return GenerationStarted(response_id=RID, seq=1, worker_id="w1", input_tokens=5)


def tokens(channel: str, text: str) -> TokensGenerated:
    return TokensGenerated(response_id=RID, seq=1, channel=channel, text=text, token_ids=(7,))  # type: ignore[arg-type]


def finished(reason: str, output: int, reasoning: int = 0) -> GenerationFinished:
    return GenerationFinished(
        response_id=RID, seq=1, finish_reason=reason,  # type: ignore[arg-type]
        usage=Usage(input_tokens=5, output_tokens=output, reasoning_tokens=reasoning),
    )


def types(state: ResponseFold) -> list[str]:
    return [event["type"] for event in state.sse_events]


def test_plain_text() -> None:
    state = fold(log_of(started(), tokens("text", "Hel"), tokens("text", "lo"), finished("stop", 2)))
    assert types(state) == [
        "response.created", "response.in_progress",
        "response.output_item.added", "response.content_part.added",
        "response.output_text.delta", "response.output_text.delta",
        "response.output_text.done", "response.content_part.done",
        "response.output_item.done", "response.completed",
    ]
    assert [e["sequence_number"] for e in state.sse_events] == list(range(10))
    response = state.response()
    assert response["status"] == "completed"
    assert response["output"][0]["content"][0]["text"] == "Hello"
    assert response["usage"]["output_tokens"] == 2
    assert response["usage"]["total_tokens"] == 7
    assert response["metadata"] == {"k": "v"}
    assert response["temperature"] == 0.0
    assert state.sse_events[0]["response"]["status"] == "queued"
    assert state.sse_events[1]["response"]["status"] == "in_progress"
    assert all(e.get("response", {}).get("usage") is None for e in state.sse_events[:-1])


def test_reasoning_then_text() -> None:
    state = fold(log_of(
        started(), tokens("reasoning", "think"), tokens("reasoning", "ing"),
        ReasoningEnded(response_id=RID, seq=1, cause="budget", reasoning_tokens=2),
        tokens("text", "Answer"), finished("stop", 4, reasoning=2),
    ))
    assert types(state)[2:10] == [
        "response.output_item.added", "response.content_part.added",
        "response.reasoning_text.delta", "response.reasoning_text.delta",
        "response.reasoning_text.done", "response.content_part.done",
        "response.output_item.done", "response.output_item.added",
    ]
    response = state.response()
    reasoning, message = response["output"]
    assert reasoning["type"] == "reasoning"
    assert reasoning["content"] == [{"type": "reasoning_text", "text": "thinking"}]
    assert message["content"][0]["text"] == "Answer"
    assert reasoning["id"] != message["id"]
    assert [0, 1] == [
        e["output_index"] for e in state.sse_events if e["type"] == "response.output_item.done"
    ]
    assert response["usage"]["output_tokens_details"]["reasoning_tokens"] == 2


def test_incomplete_at_max_output_tokens() -> None:
    state = fold(log_of(started(), tokens("text", "abcd"), finished("length", 4)))
    assert types(state)[-1] == "response.incomplete"
    response = state.response()
    assert response["status"] == "incomplete"
    assert response["incomplete_details"] == {"reason": "max_output_tokens"}
    assert response["output"][0]["status"] == "incomplete"


@pytest.mark.parametrize("max_output_tokens", [None, 100])
def test_incomplete_at_the_context_says_so(max_output_tokens: int | None) -> None:
    """A length cut short of max_output_tokens (or with none set) was the model's context:
    the reason stays the one the SDK accepts, and a message says what happened."""
    request = accepted().model_copy(update={
        "sampling": SamplingSettings(temperature=0.0, max_output_tokens=max_output_tokens)})
    body = [started(), tokens("text", "abcd"), finished("length", 4)]
    state = fold([request, *(e.model_copy(update={"seq": seq}) for seq, e in enumerate(body, 1))])
    details = state.response()["incomplete_details"]
    assert details["reason"] == "max_output_tokens"
    assert "end of the model's context: 9 tokens (5 input, 4 output)" in details["message"]
    expected = ("no max_output_tokens was set" if max_output_tokens is None
                else "before max_output_tokens (100)")
    assert expected in details["message"]
    assert state.sse_events[-1]["response"]["incomplete_details"] == details


def test_failed_mid_stream() -> None:
    state = fold(log_of(
        started(), tokens("text", "par"),
        GenerationFailed(response_id=RID, seq=1, code="engine_error", message="boom"),
    ))
    assert types(state)[-3:] == ["response.output_item.done", "error", "response.failed"]
    error = state.sse_events[-2]
    assert (error["code"], error["message"]) == ("engine_error", "boom")
    assert state.response()["status"] == "failed"
    assert state.response()["error"] == {"code": "engine_error", "message": "boom"}


def test_cancelled() -> None:
    state = fold(log_of(started(), tokens("text", "x"), finished("cancelled", 1)))
    assert state.response()["status"] == "cancelled"
    assert types(state)[-1] == "response.incomplete"


def test_replayed_and_repeated_events_are_ignored() -> None:
    events = log_of(started(), tokens("text", "a"), finished("stop", 1))
    once = fold(events)
    twice = ResponseFold()
    for event in events[:3] + events[:3] + events[3:]:
        twice.apply(event)
    assert once.sse_events == twice.sse_events
    assert twice.apply(events[-1]) == []


def test_second_generation_started_after_a_crash_is_silent() -> None:
    state = fold(log_of(started(), tokens("text", "a"), started(), tokens("text", "b"), finished("stop", 2)))
    assert types(state).count("response.in_progress") == 1
    assert state.response()["output"][0]["content"][0]["text"] == "ab"


def test_empty_text_deltas_produce_nothing() -> None:
    state = fold(log_of(started(), tokens("text", ""), finished("stop", 1)))
    assert types(state) == ["response.created", "response.in_progress", "response.completed"]


def test_log_must_start_with_request() -> None:
    with pytest.raises(ValueError, match="request.accepted"):
        ResponseFold().apply(started())


def test_codec_round_trip_every_event() -> None:
    for event in log_of(
        started(), tokens("reasoning", "é"),
        ReasoningEnded(response_id=RID, seq=1, cause="end_marker", reasoning_tokens=1),
        finished("stop", 1),
        GenerationFailed(response_id=RID, seq=1, code="c", message="m", param="input"),
    ):
        assert decode(encode(event)) == event


class SummaryWritten(Event):
    """An event type a newer writer might add, which this fold has never heard of."""

    type: Literal["summary.written"] = "summary.written"
    v: Literal[1] = 1


@pytest.mark.parametrize(
    "stranger",
    [SummaryWritten(response_id=RID, seq=1),
     CancelRequested(response_id=RID, seq=1),
     {"type": "tokens.generated", "seq": 1}],
)
def test_an_event_the_fold_does_not_know_fails_loudly(stranger: object) -> None:
    state = fold([accepted()])
    with pytest.raises(UnknownEventType, match="no case for"):
        state.apply(stranger)
    done = fold(log_of(started(), finished("stop", 1)))
    with pytest.raises(UnknownEventType):
        done.apply(stranger)


def test_every_log_event_the_codec_knows_has_a_case() -> None:
    (union, _) = get_args(AnyEvent)
    assert set(get_args(union)) - {CancelRequested} == set(LOG_EVENT_TYPES)


def test_a_compaction_item_opens_the_output() -> None:
    item = {"type": "compaction", "id": "cmp_1", "encrypted_content": "spate0.eA=="}
    log = log_of(started(), tokens("text", "Hi"), finished("stop", 1))
    log[0] = accepted().model_copy(update={"compaction": item})
    state = fold(log)
    assert types(state)[:4] == [
        "response.created", "response.in_progress",
        "response.output_item.added", "response.output_item.done",
    ]
    output = state.response()["output"]
    assert output[0] == item and output[1]["type"] == "message"
    assert state.sse_events[4]["output_index"] == 1  # the message comes after it
