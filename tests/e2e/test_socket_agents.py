"""The Agents SDK's WebSocket transport (`responses_websocket_session`, which runs
`OpenAIResponsesWSModel`) drives a tool-calling agent over spate's WebSocket mode with
`store: false`: every turn after the first sends only its new items with
`previous_response_id`, which the connection holds."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from agents import Agent, ModelSettings, RunContextWrapper, function_tool, set_tracing_disabled
from agents.responses_websocket_session import responses_websocket_session

from events import RequestAccepted
from tests.conftest import DEFAULT_MODEL, Stack
from tests.e2e.test_queue_consumer import read_log

WEATHER = {"city": "Paris", "temperature_c": 18, "sky": "sunny"}


class Calls:
    """How many times the agent's tool ran in the current user turn."""

    def __init__(self) -> None:
        self.count = 0


def weather_agent(calls: Calls) -> Agent[Any]:
    def until_called(context: RunContextWrapper[Any], agent: Any) -> bool:
        # Offered until the model has called it once: the next model turn then answers.
        return calls.count == 0

    @function_tool(is_enabled=until_called)
    def get_weather(city: str) -> str:
        """Get the current weather in a city."""
        calls.count += 1
        return json.dumps({**WEATHER, "city": city})

    return Agent(
        name="weather", instructions="Answer questions about the weather in one sentence.",
        model=DEFAULT_MODEL, tools=[get_weather],
        model_settings=ModelSettings(tool_choice="required", temperature=0, max_tokens=40,
                                     store=False, parallel_tool_calls=False),
    )


@pytest.fixture(autouse=True)
def no_tracing() -> None:
    set_tracing_disabled(True)  # traces would go to a hosted service


def test_an_agent_runs_tool_turns_over_the_socket_with_store_false(stack: Stack) -> None:
    calls = Calls()
    agent = weather_agent(calls)

    async def run() -> list[Any]:
        results = []
        async with responses_websocket_session(
            api_key="unused", base_url=f"{stack.base_url}/v1",
        ) as session:
            previous = None
            for question in ("What is the weather in Paris?", "And in Rome?"):
                calls.count = 0
                result = await session.run(agent, question, previous_response_id=previous,
                                           auto_previous_response_id=True, max_turns=4)
                assert calls.count == 1
                previous = result.last_response_id
                results.append(result)
        return results

    first, second = asyncio.run(run())
    for result in (first, second):
        kinds = [item.type for item in result.new_items]
        assert kinds[:2] == ["tool_call_item", "tool_call_output_item"], kinds
        assert kinds[-1] == "message_output_item" and result.final_output
        assert len(result.raw_responses) == 2
    responses = [*first.raw_responses, *second.raw_responses]
    ids = [response.response_id for response in responses]
    assert len(set(ids)) == 4
    # Each turn after the first was published with the whole history the socket held:
    # the last one carries both questions, both tool results and the first answer.
    log = asyncio.run(read_log(stack.nats_url, ids[-1]))
    request = log[0]
    assert isinstance(request, RequestAccepted) and not request.store
    contents = " ".join(message.content for message in request.messages)
    assert "What is the weather in Paris?" in contents and "And in Rome?" in contents
    assert contents.count("temperature_c") == 2
    assert str(first.final_output).strip() in contents
