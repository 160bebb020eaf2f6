"""Reasoning that round-trips without a store, through real processes: an API with a key
seals reasoning items, takes them back into the prompt, and refuses what was altered."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from api.lowering.encrypted_content import new_key
from cli.nats_server import free_port
from tests.conftest import DEFAULT_MODEL, Stack
from tests.e2e.test_queue_consumer import read_requests
from tests.processes import SpateProcess, wait_http

THINKING = {"reasoning": {"effort": "high"}, "thinking_token_budget": 4, "max_output_tokens": 10,
            "temperature": 0, "store": False, "include": ["reasoning.encrypted_content"]}


@pytest.fixture(scope="module")
def keyed_api(stack: Stack) -> Iterator[str]:
    """A second API replica, with a sealing key, on the stack's NATS and worker."""
    port = free_port()
    api = SpateProcess(["api", "--port", str(port)],
                       {"SPATE_NATS_URL": stack.nats_url, "SPATE_ENCRYPTION_KEYS": new_key()},
                       "keyed-api")
    try:
        wait_http(f"http://127.0.0.1:{port}/ready", api, timeout=60)
        yield f"http://127.0.0.1:{port}"
    finally:
        api.stop()


def create(base_url: str, **body: Any) -> httpx.Response:
    return httpx.post(f"{base_url}/v1/responses", json={"model": DEFAULT_MODEL, **body}, timeout=300)


def test_reasoning_round_trips_sealed(keyed_api: str, stack: Stack) -> None:
    first = create(keyed_api, input="What is 2+2?", **THINKING).json()
    reasoning = first["output"][0]
    assert reasoning["type"] == "reasoning", first
    sealed = reasoning["encrypted_content"]
    assert sealed.startswith("spate1.")
    thought = reasoning["content"][0]["text"]
    assert thought not in sealed

    # Sent back as Codex does: no content, only the sealed form.
    again = [{"role": "user", "content": "What is 2+2?"},
             {"type": "reasoning", "id": reasoning["id"], "summary": [], "encrypted_content": sealed},
             *[item for item in first["output"] if item["type"] == "message"],
             {"role": "user", "content": "And 3+3?"}]
    second = create(keyed_api, input=again, max_output_tokens=4, temperature=0, store=False)
    assert second.status_code == 200, second.text
    (event,) = asyncio.run(read_requests(stack.nats_url, {second.json()["id"]})).values()
    assert [message.reasoning for message in event.messages if message.reasoning] == [thought]

    # Another replica without the key, an altered token, and a token for another model.
    for base_url, token in ((stack.base_url, sealed), (keyed_api, sealed[:-4] + "AAAA")):
        again[1]["encrypted_content"] = token
        refused = create(base_url, input=again, max_output_tokens=4)
        assert refused.status_code == 400, refused.text
        assert refused.json()["error"]["param"] == "input[1].encrypted_content"


def test_a_stream_seals_the_done_item_and_ends_with_done(keyed_api: str) -> None:
    body = {"model": DEFAULT_MODEL, "input": "Hi", "stream": True, **THINKING}
    with httpx.stream("POST", f"{keyed_api}/v1/responses", json=body, timeout=300) as reply:
        data = [line[len("data: "):] for line in reply.iter_lines() if line.startswith("data: ")]
    assert data[-1] == "[DONE]"
    events = [json.loads(entry) for entry in data[:-1]]
    assert events[-1]["type"] == "response.completed" or events[-1]["type"] == "response.incomplete"
    done = [e["item"] for e in events if e["type"] == "response.output_item.done"
            and e["item"]["type"] == "reasoning"]
    assert done and done[0]["encrypted_content"].startswith("spate1.")
    assert events[-1]["response"]["output"][0]["encrypted_content"].startswith("spate1.")


def test_without_a_key_the_include_is_accepted_and_seals_nothing(stack: Stack) -> None:
    reply = create(stack.base_url, input="Hi", **THINKING)
    assert reply.status_code == 200, reply.text
    assert reply.json()["output"][0]["type"] == "reasoning"
    assert "encrypted_content" not in reply.json()["output"][0]
    assert "no key is configured" in stack.api.output()
