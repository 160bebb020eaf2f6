"""Malformed bodies are 400s naming what is wrong, never a 500 or a dropped connection.

The app runs in-process with NATS unreachable: validation answers before any NATS call,
so a well-formed body gets the 503 of a missing bus and every malformed one a 400."""

from __future__ import annotations

import json

import httpx
import pytest

MALFORMED = [
    {"model": "m", "input": [{"type": ["message"], "role": "user", "content": "hi"}]},
    {"model": "m", "input": [{"type": {"a": 1}, "content": "hi"}]},
    {"model": "m", "input": [{"role": ["user"], "content": "hi"}]},
    {"model": "m", "input": [{"role": "user", "content": [{"type": ["input_text"], "text": "x"}]}]},
    {"model": "m", "input": [5]},
    {"model": "m", "input": [None]},
    {"model": "m", "input": 5},
    {"model": ["m"], "input": "hi"},
    {"model": "m", "input": "hi", "seed": 10**30},
    {"model": "m", "input": "hi", "metadata": {"a": {"b": 1}}},
    {"model": "m", "input": "hi", "tools": [{"type": ["function"]}]},
    {"model": "m", "input": "hi", "tool_choice": {"type": ["function"]}},
    {"model": "m", "input": "hi", "text": {"format": {"type": ["json_schema"]}}},
    {"model": "m", "input": "hi", "include": [5]},
    {"model": "m", "input": "hi", "logit_bias": {"12": "x"}},
    {"model": "m", "input": "hi", "conversation": {"id": ["x"]}},
]


@pytest.mark.parametrize("body", MALFORMED, ids=range(len(MALFORMED)))
async def test_a_malformed_field_is_a_400(client: httpx.AsyncClient, body: dict) -> None:
    reply = await client.post("/v1/responses", json=body)
    assert reply.status_code == 400, reply.text
    assert reply.json()["error"]["type"] == "invalid_request_error"


@pytest.mark.parametrize("raw", [
    '{"model":"m","input":"hi","seed":' + "9" * 5000 + "}",
    '{"model":"m","input":"hi","metadata":' + '{"a":' * 3000 + "1" + "}" * 3000 + "}",
    '{"model":"m","input":"hi","chat_template_kwargs":' + "[" * 100 + "]" * 100 + "}",
    '{"model":"m","input":"hi","text":{"format":{"type":"json_schema","name":"x","schema":'
    + '{"type":"array","items":' * 80 + "{}" + "}" * 80 + "}}}",
], ids=["long-integer", "very-deep", "deep-kwargs", "deep-schema"])
async def test_hostile_json_is_a_400(client: httpx.AsyncClient, raw: str) -> None:
    reply = await client.post("/v1/responses", content=raw,
                              headers={"content-type": "application/json"})
    assert reply.status_code == 400, reply.text
    json.loads(reply.text)


async def test_a_well_formed_body_reaches_the_missing_bus(client: httpx.AsyncClient) -> None:
    reply = await client.post("/v1/responses", json={"model": "m", "input": "hi"})
    assert reply.status_code == 503
