"""Function calling end to end with the SDK in strict mode: the usual two-turn tool loop
(a forced call, its output sent back, then an answer), streaming and not."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from openai import OpenAI
from pydantic import BaseModel, ConfigDict

from tests.conftest import DEFAULT_MODEL, Stack
from tests.e2e.test_sdk import check_stream_invariants


class WeatherArguments(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    city: str


WEATHER_TOOL: dict[str, Any] = {
    "type": "function",
    "name": "get_weather",
    "description": "Get the current weather in a city.",
    "parameters": {**WeatherArguments.model_json_schema(), "additionalProperties": False},
    "strict": True,
}
QUESTION = {"role": "user", "content": "What is the weather in Paris?"}
WEATHER = {"city": "Paris", "temperature_c": 18, "sky": "sunny"}


@pytest.fixture(scope="module")
def client(stack: Stack) -> OpenAI:
    return OpenAI(base_url=f"{stack.base_url}/v1", api_key="unused",
                  _strict_response_validation=True, timeout=300)


def ask(client: OpenAI, **fields: Any) -> Any:
    return client.responses.create(
        **{"model": DEFAULT_MODEL, "temperature": 0, "max_output_tokens": 48, **fields},
    )


def the_call(response: Any) -> Any:
    calls = [item for item in response.output if item.type == "function_call"]
    assert len(calls) == 1, response.output
    call = calls[0]
    assert call.name == "get_weather" and call.status == "completed"
    assert call.call_id.startswith("call_")
    WeatherArguments.model_validate_json(call.arguments)
    return call


def answer_turn(client: OpenAI, first: Any, call: Any, **fields: Any) -> Any:
    conversation = [QUESTION, *first.output, {
        "type": "function_call_output", "call_id": call.call_id, "output": json.dumps(WEATHER),
    }]
    return ask(client, input=conversation, tools=[WEATHER_TOOL], tool_choice="none", **fields)


def test_tool_loop(client: OpenAI) -> None:
    first = ask(client, input=[QUESTION], tools=[WEATHER_TOOL], tool_choice="required",
                parallel_tool_calls=False)
    assert first.status == "completed"
    call = the_call(first)
    assert first.tool_choice == "required" and first.parallel_tool_calls is False
    assert [tool.name for tool in first.tools] == ["get_weather"]

    second = answer_turn(client, first, call)
    assert [item.type for item in second.output] == ["message"]
    assert second.output_text
    assert second.tool_choice == "none"


def test_tool_loop_streaming(client: OpenAI) -> None:
    events = list(ask(client, input=[QUESTION], tools=[WEATHER_TOOL],
                      tool_choice={"type": "function", "name": "get_weather"},
                      parallel_tool_calls=False, stream=True))
    final = check_stream_invariants(events)
    call = the_call(final)
    added = [e for e in events if e.type == "response.output_item.added"]
    assert added[0].item.type == "function_call" and added[0].item.status == "in_progress"
    assert added[0].item.arguments == "" and added[0].item.call_id == call.call_id
    deltas = [e for e in events if e.type == "response.function_call_arguments.delta"]
    (done,) = [e for e in events if e.type == "response.function_call_arguments.done"]
    assert len(deltas) > 1
    assert "".join(e.delta for e in deltas) == done.arguments == call.arguments
    assert {e.item_id for e in [*deltas, done]} == {call.id}

    answer = list(answer_turn(client, final, call, stream=True))
    assert check_stream_invariants(answer).output_text


def test_parallel_calls_each_get_an_item(client: OpenAI) -> None:
    response = ask(client, input="What is the weather in Paris and in Rome?",
                   tools=[WEATHER_TOOL], tool_choice="required", max_output_tokens=64)
    calls = [item for item in response.output if item.type == "function_call"]
    assert calls and len({call.call_id for call in calls}) == len(calls)
    assert len({call.id for call in calls}) == len(calls)
    for call in calls:
        WeatherArguments.model_validate_json(call.arguments)


def test_namespace_functions_are_called_by_their_qualified_name(client: OpenAI) -> None:
    crm = {"type": "namespace", "name": "crm", "description": "Customer records.", "tools": [
        {"type": "function", "name": "find_customer", "description": "Find a customer by email.",
         "parameters": {"type": "object", "properties": {"email": {"type": "string"}},
                        "required": ["email"], "additionalProperties": False}},
    ]}
    response = ask(client, input="Find the customer ann@example.com.", tools=[WEATHER_TOOL, crm],
                   tool_choice={"type": "allowed_tools", "mode": "required",
                                "tools": [{"type": "function", "name": "crm.find_customer"}]})
    (call,) = [item for item in response.output if item.type == "function_call"]
    assert (call.namespace, call.name) == ("crm", "find_customer")
    assert set(json.loads(call.arguments)) == {"email"}


def test_a_broken_parameters_schema_is_a_400_naming_it(stack: Stack) -> None:
    tool = {**WEATHER_TOOL, "parameters": {"type": "object", "properties": {"city": {"type": "nope"}}}}
    reply = httpx.post(f"{stack.base_url}/v1/responses", timeout=300, json={
        "model": DEFAULT_MODEL, "input": "hi", "tools": [tool], "tool_choice": "required",
    })
    assert reply.status_code == 400, reply.text
    assert reply.json()["error"]["param"] == "tools[0].parameters"


@pytest.mark.parametrize("max_output_tokens", [1, 3, 6, 10, 16, 24])
def test_a_call_cut_short_is_an_incomplete_call_or_nothing_never_text(
    client: OpenAI, max_output_tokens: int
) -> None:
    response = ask(client, input=[QUESTION], tools=[WEATHER_TOOL], tool_choice="required",
                   max_output_tokens=max_output_tokens)
    assert [item.type for item in response.output if item.type != "function_call"] == []
    assert "<tool_call" not in response.output_text
    if response.status == "incomplete":
        assert all(item.status == "incomplete" for item in response.output)
    for item in response.output:
        assert item.name == "get_weather"
    if max_output_tokens >= 16:  # past the name (about 15 tokens): the call has begun
        assert [item.type for item in response.output] == ["function_call"]
