"""What engine outputs become in a response's log: text, function calls, token ids."""

from __future__ import annotations

from events import ChatMessage, RequestAccepted, TokensGenerated, ToolCallEnded, ToolCallStarted
from events import ToolDefinition as Tool
from workers.engine.llm_engine import RequestOutput
from workers.engine.output_state import Delta
from workers.output.step_events import StepEvents

CALL = '<tool_call>\n{"name": "crm.find", "arguments": {"id": 7}}\n</tool_call>'


def request(**fields) -> RequestAccepted:
    return RequestAccepted(response_id="resp_ab", seq=0, model="m",
                           messages=(ChatMessage(role="user", content="hi"),), **fields)


def output(text: str, token_ids: list[int], finish_reason: str | None = None,
           replayed: str = "") -> RequestOutput:
    return RequestOutput(
        request_id="resp_ab", deltas=[Delta("text", text, token_ids)] if text else [],
        new_token_ids=token_ids, reasoning_ended=None, finished=finish_reason is not None,
        finish_reason=finish_reason, num_prompt_tokens=3, num_output_tokens=len(token_ids),
        num_reasoning_tokens=0, num_cached_tokens=0,
        replayed_deltas=[Delta("text", replayed, [])] if replayed else [],
    )


def with_tools(**fields) -> StepEvents:
    tools = (Tool(name="crm.find", namespace="crm"), Tool(name="now"))
    return StepEvents(request(tools=tools, **fields), str, in_reasoning=False)


def test_plain_text_carries_the_step_token_ids() -> None:
    events = StepEvents(request(), str, in_reasoning=False).of(output("Hello", [5, 6]))
    assert events == [(TokensGenerated, {"channel": "text", "text": "Hello", "logprobs": None,
                                         "token_ids": (5, 6)})]


def test_a_call_becomes_started_argument_deltas_and_ended() -> None:
    steps = with_tools()
    first = steps.of(output(CALL[:40], [1]))
    second = steps.of(output(CALL[40:], [2], finish_reason="stop"))
    events = first + second
    started = [fields for kind, fields in events if kind is ToolCallStarted]
    assert started == [{"call_id": "call_ab_0", "name": "find", "namespace": "crm", "kind": "function"}]
    arguments = "".join(f["text"] for kind, f in events if kind is TokensGenerated and f["channel"] == "tool_call")
    ended = [fields for kind, fields in events if kind is ToolCallEnded]
    assert ended == [{"call_id": "call_ab_0", "arguments": '{"id": 7}'}] and arguments == '{"id": 7}'
    # Every step's ids reach the log, on an id-only event when its text is held back.
    ids = [f.get("token_ids") for kind, f in events if kind is TokensGenerated and f.get("token_ids")]
    assert ids == [(1,), (2,)]


def test_a_held_step_still_logs_its_token_ids() -> None:
    assert with_tools().of(output("<tool", [9])) == [
        (TokensGenerated, {"channel": "text", "text": "", "token_ids": (9,)}),
    ]


def test_a_call_cut_by_the_length_limit_is_left_open() -> None:
    events = with_tools().of(output(CALL[:50], [1], finish_reason="length"))
    assert any(kind is ToolCallStarted for kind, _ in events)
    assert not any(kind is ToolCallEnded for kind, _ in events)


def test_a_resumed_response_catches_up_silently_and_numbers_calls_on() -> None:
    steps = with_tools()
    events = steps.of(output("\n<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>",
                             [4], finish_reason="stop", replayed=CALL))
    started = [fields for kind, fields in events if kind is ToolCallStarted]
    assert started == [{"call_id": "call_ab_1", "name": "now", "namespace": None, "kind": "function"}]


def test_tool_choice_none_leaves_the_text_alone() -> None:
    events = with_tools(tool_choice="none").of(output(CALL, [1], finish_reason="stop"))
    assert [fields["text"] for _, fields in events] == [CALL]
