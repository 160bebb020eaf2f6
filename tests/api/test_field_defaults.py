"""Every field of the table in api/schema/fields.py, sent at its default value, is accepted: clients
send `background: false` or `previous_response_id: null` while asking for nothing. The
fields the store would turn on stay 400s that name the field and SPATE_STORE_URL while the
store is off (the API in-process; tests/api/test_request_errors.py checks a real server)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from api.schema.fields import FIELDS, OFF_VALUES, STORE_ENV, Treatment
from api.schema.request import FieldRejected, ResponsesRequest

REQUIRED = {"model": "m", "input": "hi"}

# The value each field takes when left out: the request model's own default, else the
# value that leaves the feature off.
DEFAULTS: dict[str, Any] = {
    name: ResponsesRequest.model_fields[name].default
    if name in ResponsesRequest.model_fields else OFF_VALUES.get(name)
    for name in FIELDS if name not in REQUIRED
}

# The defaults OpenAI documents where they are not null; clients that fill every field in
# send these.
OPENAI_DEFAULTS: dict[str, Any] = {
    "background": False, "store": True, "stream": False, "temperature": 1, "top_p": 1,
    "parallel_tool_calls": True, "tool_choice": "auto", "tools": [], "truncation": "disabled",
    "service_tier": "auto", "top_logprobs": 0, "include": [], "metadata": {},
    "text": {"format": {"type": "text"}}, "reasoning": {"effort": None, "summary": None},
}

STORE_FIELDS = {"background": True, "previous_response_id": "resp_1", "conversation": "conv_1"}


def validate(**fields: Any) -> ResponsesRequest:
    return ResponsesRequest.model_validate({**REQUIRED, **fields})


def test_the_sweep_covers_every_field_but_the_required_ones() -> None:
    assert set(DEFAULTS) | set(REQUIRED) == set(FIELDS)
    assert {name for name, (treatment, _) in FIELDS.items()
            if treatment is Treatment.NEEDS_STORE} == set(STORE_FIELDS)


@pytest.mark.parametrize("name", sorted(DEFAULTS))
def test_a_field_at_its_default_is_accepted(name: str) -> None:
    request = validate(**{name: DEFAULTS[name]})
    assert request == validate()


def test_every_field_at_its_default_at_once() -> None:
    assert validate(**DEFAULTS) == validate()


@pytest.mark.parametrize(("name", "value"), sorted(OPENAI_DEFAULTS.items()))
def test_a_field_at_openai_default_is_accepted(name: str, value: Any) -> None:
    validate(**{name: value})


@pytest.mark.parametrize(("name", "value"), sorted(STORE_FIELDS.items()))
async def test_turning_a_store_feature_on_names_the_field_and_the_variable(
    client: httpx.AsyncClient, name: str, value: Any
) -> None:
    """The store is off here: the request is refused before anything is published."""
    reply = await client.post("/v1/responses", json={**REQUIRED, name: value})
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert error["param"] == name
    assert STORE_ENV in error["message"]


@pytest.mark.parametrize("value", [0, "false", [], {}])
async def test_only_the_default_itself_passes_for_background(
    client: httpx.AsyncClient, value: Any
) -> None:
    reply = await client.post("/v1/responses", json={**REQUIRED, "background": value})
    assert reply.status_code == 400, reply.text
    assert reply.json()["error"]["param"] == "background"


@pytest.mark.parametrize("name", sorted(
    name for name, (treatment, _) in FIELDS.items() if treatment is Treatment.REJECTED
))
def test_a_refused_field_with_a_value_is_still_a_400(name: str) -> None:
    with pytest.raises(FieldRejected) as raised:
        validate(**{name: {"x": 1}})
    assert raised.value.param == name


async def test_an_item_reference_needs_the_store(client: httpx.AsyncClient) -> None:
    body = {**REQUIRED, "input": [{"type": "item_reference", "id": "msg_1"}]}
    reply = await client.post("/v1/responses", json=body)
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert error["param"] == "input[0]"
    assert STORE_ENV in error["message"]
