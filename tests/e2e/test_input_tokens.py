"""POST /v1/responses/input_tokens end to end: the API asks a worker of the model, which
counts the prompt it would build; read through the official SDK in strict mode."""

from __future__ import annotations

import httpx
import pytest
from openai import BadRequestError, NotFoundError, OpenAI

from tests.conftest import DEFAULT_MODEL, Stack

LONGER = "Hi. Tell me about the sea, the sky and the mountains, in that order."


def sdk(stack: Stack) -> OpenAI:
    return OpenAI(base_url=f"{stack.base_url}/v1", api_key="unused",
                  _strict_response_validation=True)


def test_counts_grow_with_the_input_and_match_a_create(stack: Stack) -> None:
    client = sdk(stack)
    short = client.responses.input_tokens.count(model=DEFAULT_MODEL, input="Hi")
    assert short.object == "response.input_tokens" and short.input_tokens > 0
    longer = client.responses.input_tokens.count(model=DEFAULT_MODEL, input=LONGER)
    assert longer.input_tokens > short.input_tokens
    # Instructions replace the template's default system prompt, so compare two of them.
    brief, wordy = (client.responses.input_tokens.count(
        model=DEFAULT_MODEL, input="Hi", instructions=instructions).input_tokens
        for instructions in ("Answer in French.", "Answer in French, politely, in one line."))
    assert wordy > brief
    turns = client.responses.input_tokens.count(model=DEFAULT_MODEL, input=[
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello! How can I help?"},
        {"role": "user", "content": "Hi"}])
    assert turns.input_tokens > short.input_tokens
    created = client.responses.create(model=DEFAULT_MODEL, input=LONGER, max_output_tokens=1)
    assert created.usage.input_tokens == longer.input_tokens


def test_a_bad_request_is_refused_as_create_would(stack: Stack) -> None:
    client = sdk(stack)
    with pytest.raises(NotFoundError) as unknown:
        client.responses.input_tokens.count(model="no-such-model", input="Hi")
    assert unknown.value.body["param"] == "model"
    with pytest.raises(BadRequestError) as no_input:
        client.responses.input_tokens.count(model=DEFAULT_MODEL)
    assert no_input.value.body["param"] == "input"
    reply = httpx.post(f"{stack.base_url}/v1/responses/input_tokens",
                       json={"model": DEFAULT_MODEL, "input": "Hi", "colour": "red"}, timeout=30)
    assert reply.status_code == 400 and reply.json()["error"]["param"] == "colour"
    reply = httpx.post(f"{stack.base_url}/v1/responses/input_tokens",
                       json={"model": DEFAULT_MODEL, "input": "Hi", "conversation": "conv_x"},
                       timeout=30)
    assert reply.status_code == 400 and "SPATE_STORE_URL" in reply.json()["error"]["message"]
