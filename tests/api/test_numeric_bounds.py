"""Every numeric request field has a bound (docs/api.md), and a value past it is a 400
naming the field, before anything reaches NATS or a worker.

The app runs in-process with NATS unreachable, so a body that passes validation gets the
503 of a missing bus: a 400 here means the API refused the value itself."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from api.app import create_app
from api.settings import ApiSettings
from cli.nats_server import free_port
from events.request_settings import (
    MAX_OUTPUT_TOKENS,
    MAX_THINKING_TOKEN_BUDGET,
    MAX_TOKEN_ID,
    MAX_TOKEN_ID_ENTRIES,
    MAX_TOOL_CALLS,
    MAX_TOP_K,
    MAX_TOP_LOGPROBS,
    PRIORITY_LIMIT,
)

# (field, a value past its bound, a value at its bound)
BOUNDS = [
    ("max_output_tokens", MAX_OUTPUT_TOKENS + 1, MAX_OUTPUT_TOKENS),
    ("max_output_tokens", 0, 1),
    ("thinking_token_budget", MAX_THINKING_TOKEN_BUDGET + 1, MAX_THINKING_TOKEN_BUDGET),
    ("top_k", MAX_TOP_K + 1, MAX_TOP_K),
    ("top_k", 10**40, -1),
    ("top_logprobs", MAX_TOP_LOGPROBS + 1, MAX_TOP_LOGPROBS),
    ("temperature", 2.01, 2),
    ("temperature", -0.01, 0),
    ("top_p", 0, 1),
    ("min_p", 1.01, 1),
    ("presence_penalty", 2.01, -2),
    ("frequency_penalty", -2.01, 2),
    ("repetition_penalty", 10.01, 10),
    ("repetition_penalty", 0, 0.01),
    ("seed", 2**63, 2**63 - 1),
    ("seed", -(2**63) - 1, -(2**63)),
    ("priority", PRIORITY_LIMIT + 1, PRIORITY_LIMIT),
    ("priority", -1, 0),  # below the default floor, 0
    ("max_tool_calls", MAX_TOOL_CALLS + 1, MAX_TOOL_CALLS),
    ("stop_token_ids", [MAX_TOKEN_ID + 1], [MAX_TOKEN_ID]),
    ("stop_token_ids", list(range(MAX_TOKEN_ID_ENTRIES + 1)), list(range(MAX_TOKEN_ID_ENTRIES))),
    ("logit_bias", {str(MAX_TOKEN_ID + 1): 1}, {str(MAX_TOKEN_ID): 1}),
    ("logit_bias", {str(i): 1 for i in range(MAX_TOKEN_ID_ENTRIES + 1)},
     {str(i): 1 for i in range(MAX_TOKEN_ID_ENTRIES)}),
]


async def app_client(**settings: object) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(ApiSettings(nats_url=f"nats://127.0.0.1:{free_port()}", **settings))
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with app.router.lifespan_context(app), httpx.AsyncClient(
        transport=transport, base_url="http://spate"
    ) as connected:
        yield connected


@pytest.fixture
async def trusting_client() -> AsyncIterator[httpx.AsyncClient]:
    async for connected in app_client(priority_floor=-PRIORITY_LIMIT):
        yield connected


@pytest.mark.parametrize(("field", "past", "at"), BOUNDS,
                         ids=[f"{field}-{index}" for index, (field, _, _) in enumerate(BOUNDS)])
async def test_a_value_past_its_bound_is_a_400_naming_the_field(
    client: httpx.AsyncClient, field: str, past: object, at: object
) -> None:
    reply = await client.post("/v1/responses", json={"model": "m", "input": "hi", field: past})
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert (error["type"], error["param"]) == ("invalid_request_error", field), error
    assert field in error["message"]
    # The bound itself is allowed: the request goes on (to the missing bus).
    reply = await client.post("/v1/responses", json={"model": "m", "input": "hi", field: at})
    assert reply.status_code == 503, reply.text


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
async def test_non_json_numbers_are_a_400(client: httpx.AsyncClient, constant: str) -> None:
    raw = '{"model":"m","input":"hi","temperature":' + constant + "}"
    reply = await client.post("/v1/responses", content=raw,
                              headers={"content-type": "application/json"})
    assert reply.status_code == 400, reply.text
    assert reply.json()["error"]["code"] == "invalid_json"


async def test_the_operator_can_let_clients_jump_ahead(trusting_client: httpx.AsyncClient) -> None:
    body = {"model": "m", "input": "hi", "priority": -PRIORITY_LIMIT}
    assert (await trusting_client.post("/v1/responses", json=body)).status_code == 503
    body["priority"] = -PRIORITY_LIMIT - 1
    reply = await trusting_client.post("/v1/responses", json=body)
    assert reply.status_code == 400 and reply.json()["error"]["param"] == "priority"
