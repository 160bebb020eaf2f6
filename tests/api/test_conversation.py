"""Input items lowered into chat turns, tools and the answer's constraint (no server)."""

from __future__ import annotations

from typing import Any

from api.lowering.accept import accept
from api.schema.request import ResponsesRequest
from events import ChatMessage, ToolCall

WEATHER = {"type": "function", "name": "get_weather",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}


def accepted(**body: Any):
    return accept(ResponsesRequest.model_validate({"model": "m", "input": "hi", **body}), "resp_t", owner="shared")


def test_a_tool_loop_becomes_assistant_calls_and_tool_turns() -> None:
    event = accepted(instructions="Be brief.", input=[
        {"role": "user", "content": "Weather in Paris and Rome?"},
        {"type": "reasoning", "id": "rs_1", "summary": [],
         "content": [{"type": "reasoning_text", "text": "Two cities."}]},
        {"type": "message", "role": "assistant", "id": "msg_1", "status": "completed",
         "content": [{"type": "output_text", "text": "Checking.", "annotations": [], "logprobs": []}]},
        {"type": "function_call", "id": "fc_1", "call_id": "c1", "name": "get_weather",
         "arguments": '{"city": "Paris"}', "status": "completed"},
        {"type": "function_call", "call_id": "c2", "name": "lookup", "namespace": "atlas",
         "arguments": '{"city": "Rome"}'},
        {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
        {"type": "function_call_output", "call_id": "c2",
         "output": [{"type": "input_text", "text": "rain"}]},
    ])
    assert event.messages == (
        ChatMessage(role="system", content="Be brief."),
        ChatMessage(role="user", content="Weather in Paris and Rome?"),
        ChatMessage(role="assistant", content="Checking.", reasoning="Two cities.", tool_calls=(
            ToolCall(call_id="c1", name="get_weather", arguments='{"city": "Paris"}'),
            ToolCall(call_id="c2", name="atlas.lookup", arguments='{"city": "Rome"}'),
        )),
        ChatMessage(role="tool", content="sunny", tool_call_id="c1"),
        ChatMessage(role="tool", content="rain", tool_call_id="c2"),
    )


def test_tool_choice_is_lowered_to_a_mode_and_allowed_names() -> None:
    namespace = {"type": "namespace", "name": "crm", "description": "Customers.",
                 "tools": [{"type": "function", "name": "find", "description": "By email."}]}
    named = accepted(tools=[WEATHER, namespace], tool_choice={"type": "function", "name": "crm.find"})
    assert (named.tool_choice, named.allowed_tool_names) == ("required", ("crm.find",))
    assert [(t.name, t.namespace, t.description, t.param) for t in named.tools] == [
        ("get_weather", None, None, "tools[0].parameters"),
        ("crm.find", "crm", "Customers. By email.", "tools[1].tools[0].parameters"),
    ]
    allowed = accepted(tools=[WEATHER, namespace], parallel_tool_calls=False, tool_choice={
        "type": "allowed_tools", "mode": "auto", "tools": [{"type": "function", "name": "get_weather"}]})
    assert (allowed.tool_choice, allowed.allowed_tool_names) == ("auto", ("get_weather",))
    assert allowed.parallel_tool_calls is False
    assert (accepted(tools=[WEATHER]).tool_choice, accepted().tool_choice) == ("auto", "none")


def test_the_response_echoes_tools_choice_and_format_as_sent() -> None:
    text = {"format": {"type": "json_schema", "name": "answer", "strict": True,
                       "schema": {"type": "object"}}}
    event = accepted(tools=[WEATHER], tool_choice="required", text=text)
    # `strict` always comes back (the SDK's and Open Responses' shape): true unless sent.
    assert event.echo["tools"] == [{**WEATHER, "strict": True}]
    strict_off = accepted(tools=[{**WEATHER, "strict": False}, {"type": "function", "name": "now"}])
    assert strict_off.echo["tools"] == [{**WEATHER, "strict": False},
                                        {"type": "function", "name": "now", "parameters": None,
                                         "strict": True}]
    assert event.echo["tool_choice"] == "required"
    assert event.echo["text"] == text
    assert event.answer_constraint is not None
    assert (event.answer_constraint.kind, event.answer_constraint.param) == ("json_schema", "text.format.schema")


def test_structured_outputs_become_the_answer_constraint() -> None:
    schema = accepted(structured_outputs={"json": '{"type": "object"}'}).answer_constraint
    assert (schema.kind, schema.json_schema, schema.param) == ("json_schema", {"type": "object"},
                                                               "structured_outputs.json")
    choice = accepted(structured_outputs={"choice": ["a", "b"]}).answer_constraint
    assert (choice.kind, choice.choices) == ("choice", ("a", "b"))
    assert accepted(structured_outputs={"regex": "x+"}).answer_constraint.pattern == "x+"
    assert accepted(structured_outputs={"grammar": 'root ::= "a"'}).answer_constraint.kind == "grammar"
    assert accepted(text={"format": {"type": "json_object"}}).answer_constraint.kind == "json_object"
    assert accepted(text={"format": {"type": "text"}}).answer_constraint is None
