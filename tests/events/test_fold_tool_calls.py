"""Given a log with function calls, then these SSE events and this Response."""

from __future__ import annotations

from events import (
    GenerationFailed,
    ToolCallEnded,
    ToolCallStarted,
    decode,
    encode,
    fold,
)
from tests.events.test_fold import RID, finished, log_of, started, tokens, types


def call_started(index: int, name: str = "get_weather", namespace: str | None = None) -> ToolCallStarted:
    return ToolCallStarted(response_id=RID, seq=1, call_id=f"call_abc_{index}", name=name,
                           namespace=namespace)


def call_ended(index: int, arguments: str) -> ToolCallEnded:
    return ToolCallEnded(response_id=RID, seq=1, call_id=f"call_abc_{index}", arguments=arguments)


def test_a_function_call_streams_its_arguments() -> None:
    state = fold(log_of(
        started(), call_started(0), tokens("tool_call", '{"city": '), tokens("tool_call", '"Paris"}'),
        call_ended(0, '{"city": "Paris"}'), finished("stop", 20),
    ))
    assert types(state) == [
        "response.created", "response.in_progress",
        "response.output_item.added",
        "response.function_call_arguments.delta", "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done", "response.completed",
    ]
    added, first, second, done, item_done = state.sse_events[2:7]
    assert added["item"] == {
        "id": "fc_abc_0", "type": "function_call", "call_id": "call_abc_0", "name": "get_weather",
        "arguments": "", "status": "in_progress",
    }
    assert first["delta"] + second["delta"] == done["arguments"] == '{"city": "Paris"}'
    assert {e["item_id"] for e in (first, second, done)} == {"fc_abc_0"}
    assert {e["output_index"] for e in (added, first, second, done, item_done)} == {0}
    (call,) = state.response()["output"]
    assert call == {**added["item"], "arguments": '{"city": "Paris"}', "status": "completed"}
    assert item_done["item"] == call


def test_text_then_two_calls_are_three_items_in_order() -> None:
    state = fold(log_of(
        started(), tokens("text", "Let me check."),
        call_started(0), tokens("tool_call", "{}"), call_ended(0, "{}"),
        call_started(1, "find", namespace="crm"), tokens("tool_call", '{"id": 1}'),
        call_ended(1, '{"id": 1}'), finished("stop", 30),
    ))
    message, first, second = state.response()["output"]
    assert message["type"] == "message" and message["content"][0]["text"] == "Let me check."
    assert message["status"] == "completed"
    assert (first["call_id"], first["arguments"]) == ("call_abc_0", "{}")
    assert (second["name"], second["namespace"], second["id"]) == ("find", "crm", "fc_abc_2")
    assert "namespace" not in first
    assert [e["output_index"] for e in state.sse_events if e["type"] == "response.output_item.done"] == [0, 1, 2]


def test_a_call_cut_by_max_output_tokens_is_incomplete() -> None:
    state = fold(log_of(started(), call_started(0), tokens("tool_call", '{"city": "Par'),
                        finished("length", 16)))
    assert types(state)[-3:] == [
        "response.function_call_arguments.done", "response.output_item.done", "response.incomplete",
    ]
    (call,) = state.response()["output"]
    assert (call["status"], call["arguments"]) == ("incomplete", '{"city": "Par')


def test_an_open_call_shows_in_progress_and_a_failure_closes_it() -> None:
    events = log_of(started(), call_started(0), tokens("tool_call", "{"),
                    GenerationFailed(response_id=RID, seq=1, code="engine_error", message="boom"))
    partial = fold(events[:-1]).response()
    assert partial["output"][0]["status"] == "in_progress"
    assert partial["output"][0]["arguments"] == "{"
    state = fold(events)
    assert types(state)[-2:] == ["error", "response.failed"]
    assert state.response()["output"][0]["status"] == "incomplete"


def test_argument_text_outside_a_call_and_id_only_events_produce_nothing() -> None:
    state = fold(log_of(started(), tokens("tool_call", "{}"), call_started(0), tokens("text", ""),
                        call_ended(0, ""), finished("stop", 3)))
    assert "response.function_call_arguments.delta" not in types(state)
    assert state.response()["output"][0]["arguments"] == ""


def test_codec_round_trip_of_call_events() -> None:
    for event in (call_started(0, "find", "crm"), call_ended(0, '{"a": [1, "é"]}'),
                  tokens("tool_call", '{"a"')):
        assert decode(encode(event)) == event
