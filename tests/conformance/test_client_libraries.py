"""The client libraries people point at a Responses server, against real processes: the
official SDK in strict mode (which validates every body and event, and must stop at the
stream's `data: [DONE]`), the Agents SDK and LangChain."""

from __future__ import annotations

import asyncio

import pytest
from openai import AsyncOpenAI, OpenAI

from events import TERMINAL_SSE_TYPES
from tests.conftest import DEFAULT_MODEL, Stack

# Greedy, the default model answers it in a few tokens and stops (the Agents SDK fails a
# run whose response ends incomplete).
QUESTION = "Say hello in exactly 3 words."


def test_the_strict_sdk_reads_a_stream_to_its_end(stack: Stack) -> None:
    client = OpenAI(base_url=f"{stack.base_url}/v1", api_key="unused",
                    _strict_response_validation=True, timeout=300)
    events = list(client.responses.create(model=DEFAULT_MODEL, input="Say hello", stream=True,
                                          temperature=0, max_output_tokens=16))
    assert events[-1].type in TERMINAL_SSE_TYPES
    assert [event.sequence_number for event in events] == list(range(len(events)))
    # The helper wants response.completed: a question the model finishes.
    with client.responses.stream(model=DEFAULT_MODEL, input=QUESTION, temperature=0,
                                 max_output_tokens=200) as streamed:
        final = streamed.get_final_response()
    assert final.output_text


def test_the_agents_sdk_runs_an_agent(stack: Stack) -> None:
    agents = pytest.importorskip("agents")
    agents.set_tracing_disabled(True)

    def agent() -> object:
        # A client a loop: run_sync and asyncio.run each run their own event loop.
        model = agents.OpenAIResponsesModel(model=DEFAULT_MODEL, openai_client=AsyncOpenAI(
            base_url=f"{stack.base_url}/v1", api_key="unused", timeout=300))
        return agents.Agent(name="greeter", instructions="Answer in one short sentence.",
                            model=model,
                            model_settings=agents.ModelSettings(temperature=0, max_tokens=200))

    result = agents.Runner.run_sync(agent(), QUESTION)
    assert isinstance(result.final_output, str) and result.final_output

    async def streamed() -> str:
        run = agents.Runner.run_streamed(agent(), QUESTION)
        async for _ in run.stream_events():
            pass
        return str(run.final_output)

    assert asyncio.run(streamed()) == result.final_output


def test_langchain_chat_model_invokes_and_streams(stack: Stack) -> None:
    langchain_openai = pytest.importorskip("langchain_openai")
    chat = langchain_openai.ChatOpenAI(
        model=DEFAULT_MODEL, base_url=f"{stack.base_url}/v1", api_key="unused",
        use_responses_api=True, temperature=0, max_tokens=200, timeout=300)
    answer = chat.invoke(QUESTION)
    assert answer.text
    assert "".join(chunk.text for chunk in chat.stream(QUESTION)) == answer.text
