"""Every request field: honored ones reach the request event (read as a queue consumer
would) or change the output, echoed ones come back on the Response."""

from __future__ import annotations

import asyncio
import json
import math
from typing import Any

import httpx
import pytest

from tests.conftest import DEFAULT_MODEL, Stack
from tests.e2e.test_queue_consumer import read_requests

# field -> (value sent, how the request event carries it)
HONORED: dict[str, tuple[Any, Any]] = {
    "temperature": (0.3, lambda e: e.sampling.temperature == 0.3),
    "top_p": (0.9, lambda e: e.sampling.top_p == 0.9),
    "top_k": (7, lambda e: e.sampling.top_k == 7),
    "min_p": (0.05, lambda e: e.sampling.min_p == 0.05),
    "seed": (1234, lambda e: e.sampling.seed == 1234),
    "stop": ("\n\n", lambda e: e.sampling.stop == ("\n\n",)),
    "max_output_tokens": (2, lambda e: e.sampling.max_output_tokens == 2),
    "presence_penalty": (0.5, lambda e: e.sampling.presence_penalty == 0.5),
    "frequency_penalty": (-0.5, lambda e: e.sampling.frequency_penalty == -0.5),
    "repetition_penalty": (1.1, lambda e: e.sampling.repetition_penalty == 1.1),
    "stop_token_ids": ([2], lambda e: e.sampling.stop_token_ids == (2,)),
    "ignore_eos": (True, lambda e: e.sampling.ignore_eos is True),
    "skip_special_tokens": (False, lambda e: e.sampling.skip_special_tokens is False),
    "spaces_between_special_tokens": (False, lambda e: e.sampling.spaces_between_special_tokens is False),
    "include_stop_str_in_output": (True, lambda e: e.sampling.include_stop_str_in_output is True),
    "logit_bias": ({"17": 250}, lambda e: e.sampling.logit_bias == {17: 100.0}),
    "include": (["message.output_text.logprobs"], lambda e: e.sampling.top_logprobs == 0),
    "include_reasoning": (False, lambda e: e.include_reasoning is False),
    "truncation": ("auto", lambda e: e.truncation == "auto"),
    "priority": (3, lambda e: e.priority == 3),
    "cache_salt": ("tenant-a", lambda e: e.cache_salt == "tenant-a"),
    "enable_response_messages": (True, lambda e: e.enable_response_messages is True),
    "session_id": ("s-1", lambda e: e.session_id == "s-1"),
    "kv_transfer_params": ({"do_remote_decode": False}, lambda e: e.kv_transfer_params == {"do_remote_decode": False}),
    "ec_transfer_params": ({"k": 1}, lambda e: e.ec_transfer_params == {"k": 1}),
    "vllm_xargs": ({"x": "y"}, lambda e: e.vllm_xargs == {"x": "y"}),
    "chat_template_kwargs": ({"enable_thinking": False}, lambda e: e.chat_template_kwargs == {"enable_thinking": False}),
    "reasoning": ({"effort": "low"}, lambda e: e.reasoning_effort == "low" and e.enable_thinking is True),
    "thinking_token_budget": (4, lambda e: e.thinking_token_budget == 4),
    "instructions": ("Be brief.", lambda e: e.messages[0].role == "system"),
    "tools": ([{"type": "function", "name": "now"}],
              lambda e: [t.name for t in e.tools] == ["now"] and e.tool_choice == "auto"),
    "parallel_tool_calls": (False, lambda e: e.parallel_tool_calls is False),
    "structured_outputs": ({"choice": ["a", "b"]}, lambda e: e.answer_constraint.choices == ("a", "b")),
    "client_metadata": ({"x-codex-window-id": "w:0"},
                        lambda e: e.client_metadata == {"x-codex-window-id": "w:0"}),
    "prompt_cache_key": ("thread-1", lambda e: e.prompt_cache_key == "thread-1"),
}

ECHOED: dict[str, Any] = {
    "metadata": {"a": "b"},
    "user": "u-1",
    "instructions": "Be brief.",
    "max_tool_calls": 3,
    "parallel_tool_calls": False,
    "service_tier": "flex",
    "prompt_cache_key": "k",
    "prompt_cache_options": {"mode": "implicit", "ttl": "30m"},
    "prompt_cache_retention": "24h",
    "safety_identifier": "sid",
    "top_logprobs": 2,
    "truncation": "auto",
    "kv_transfer_params": {"do_remote_decode": False},
    "text": {"format": {"type": "text"}},
    "reasoning": {"effort": "low", "summary": None},
    "temperature": 0.0,
    "top_p": 0.5,
}


def create(stack: Stack, **fields: Any) -> httpx.Response:
    body = {"model": DEFAULT_MODEL, "input": "Hi", "max_output_tokens": 2, **fields}
    return httpx.post(f"{stack.base_url}/v1/responses", json=body, timeout=300)


def test_honored_fields_reach_the_request_event(stack: Stack) -> None:
    ids = {}
    for field, (value, _) in HONORED.items():
        reply = create(stack, **{field: value})
        assert reply.status_code == 200, (field, reply.text)
        ids[field] = reply.json()["id"]
    events = asyncio.run(read_requests(stack.nats_url, set(ids.values())))
    failed = [field for field, (_, check) in HONORED.items() if not check(events[ids[field]])]
    assert not failed


def test_request_id_becomes_the_response_id(stack: Stack) -> None:
    reply = create(stack, request_id="my-request-1")
    assert reply.json()["id"] == "my-request-1"
    again = create(stack, request_id="my-request-1")
    assert again.status_code == 409 and again.json()["error"]["param"] == "request_id"


@pytest.mark.parametrize("field", sorted(ECHOED))
def test_echoed_fields_come_back(stack: Stack, field: str) -> None:
    reply = create(stack, **{field: ECHOED[field]})
    assert reply.status_code == 200, reply.text
    assert reply.json()[field] == ECHOED[field]


def test_response_messages_are_null_unless_asked(stack: Stack) -> None:
    plain = create(stack).json()
    assert plain["input_messages"] is None and plain["output_messages"] is None
    asked = create(stack, enable_response_messages=True, temperature=0).json()
    (prompt,) = asked["input_messages"]
    (output,) = asked["output_messages"]
    assert "<|im_start|>user\nHi<|im_end|>" in prompt["message"]
    assert len(prompt["tokens"]) == asked["usage"]["input_tokens"]
    assert len(output["tokens"]) == asked["usage"]["output_tokens"]
    assert output["message"].startswith(asked["output"][0]["content"][0]["text"])


def test_include_reasoning_false_leaves_the_reasoning_out(stack: Stack) -> None:
    fields = {"reasoning": {"effort": "high"}, "thinking_token_budget": 3, "max_output_tokens": 8,
              "temperature": 0}
    shown = create(stack, **fields).json()
    hidden = create(stack, include_reasoning=False, **fields).json()
    assert [item["type"] for item in shown["output"]][0] == "reasoning"
    assert all(item["type"] != "reasoning" for item in hidden["output"])
    assert hidden["usage"]["output_tokens_details"]["reasoning_tokens"] == 3


def test_logprobs_on_every_delta(stack: Stack) -> None:
    body = {"model": DEFAULT_MODEL, "input": "Count to five.", "max_output_tokens": 8, "stream": True,
            "temperature": 0, "include": ["message.output_text.logprobs"], "top_logprobs": 3}
    deltas = []
    with httpx.stream("POST", f"{stack.base_url}/v1/responses", json=body, timeout=300) as reply:
        for line in reply.iter_lines():
            if line.startswith("data: {"):
                event = json.loads(line[5:])
                if event["type"] == "response.output_text.delta":
                    deltas.append(event)
    assert deltas
    for delta in deltas:
        assert delta["logprobs"], delta
        for entry in delta["logprobs"]:
            assert entry["logprob"] <= 0 and math.isfinite(entry["logprob"])
            assert len(entry["top_logprobs"]) <= 3
            assert all(alt["logprob"] <= 0 for alt in entry["top_logprobs"])


def test_truncation(stack: Stack) -> None:
    long_turn = {"role": "user", "content": "word " * 9000}
    last_turn = {"role": "user", "content": "Say hi"}
    refused = create(stack, input=[long_turn, last_turn])
    assert refused.status_code == 400, refused.text
    assert refused.json()["error"]["param"] == "input"
    truncated = create(stack, input=[long_turn, last_turn], truncation="auto")
    assert truncated.status_code == 200, truncated.text
    assert truncated.json()["usage"]["input_tokens"] < 100


def test_token_ids_outside_the_vocabulary_name_the_field(stack: Stack) -> None:
    reply = create(stack, logit_bias={"999999": 5})
    assert reply.status_code == 400, reply.text
    assert reply.json()["error"]["param"] == "logit_bias"


def test_logit_bias_bans_the_greedy_first_token(stack: Stack) -> None:
    base = create(stack, temperature=0, max_output_tokens=3, enable_response_messages=True).json()
    first_token = base["output_messages"][0]["tokens"][0]
    banned = create(stack, temperature=0, max_output_tokens=3, enable_response_messages=True,
                    logit_bias={str(first_token): -100}).json()
    assert banned["output_messages"][0]["tokens"][0] != first_token


def test_stop_token_ids_end_the_answer(stack: Stack) -> None:
    base = create(stack, temperature=0, max_output_tokens=6, enable_response_messages=True).json()
    tokens = base["output_messages"][0]["tokens"]
    stopped = create(stack, temperature=0, max_output_tokens=6, enable_response_messages=True,
                     stop_token_ids=[tokens[2]]).json()
    assert stopped["status"] == "completed"
    assert stopped["usage"]["output_tokens"] == tokens.index(tokens[2]) + 1


def test_sampling_left_out_follows_the_model_recommendation(stack: Stack) -> None:
    response = create(stack).json()
    assert (response["temperature"], response["top_p"]) == (0.2, 0.9)
    chosen = create(stack, temperature=1.0, top_p=1.0).json()
    assert (chosen["temperature"], chosen["top_p"]) == (1.0, 1.0)
