"""/openapi.json describes every request body (generated from the request models), is a
valid OpenAPI 3.1 document, and each body schema is a valid JSON Schema that agrees with
the model: what the schema generates, the model takes."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import jsonschema_rs
import pytest
from schemathesis.specs.openapi.definitions import OPENAPI_31_VALIDATOR

from api.app import create_app
from api.schema.fields import FIELDS
from api.schema.openapi import BODIES
from api.schema.request import ResponsesRequest
from api.settings import ApiSettings


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    """The app without its lifespan: the document needs no NATS."""
    transport = httpx.ASGITransport(app=create_app(ApiSettings()))
    async with httpx.AsyncClient(transport=transport, base_url="http://spate") as connected:
        yield connected


async def document(client: httpx.AsyncClient) -> dict[str, Any]:
    reply = await client.get("/openapi.json")
    assert reply.status_code == 200
    return reply.json()


async def test_the_document_is_valid_openapi(client: httpx.AsyncClient) -> None:
    openapi = await document(client)
    assert openapi["openapi"].startswith("3.1")
    errors = [str(error) for error in OPENAPI_31_VALIDATOR.iter_errors(openapi)]
    assert not errors, errors[:5]
    for name, schema in openapi["components"]["schemas"].items():
        assert jsonschema_rs.meta.is_valid(schema), name


async def test_every_body_is_described(client: httpx.AsyncClient) -> None:
    openapi = await document(client)
    for (path, method), model in BODIES.items():
        body = openapi["paths"][path][method]["requestBody"]
        assert body["content"]["application/json"]["schema"] == {
            "$ref": f"#/components/schemas/{model.__name__}"}, path


async def test_the_responses_body_lists_every_field(client: httpx.AsyncClient) -> None:
    schema = (await document(client))["components"]["schemas"]["ResponsesRequest"]
    assert set(schema["properties"]) == set(FIELDS)
    assert schema["required"] == ["model", "input"]
    assert schema["additionalProperties"] is False


def as_local(value: Any) -> Any:
    """Component references as local ones, for a validator of one schema with `$defs`."""
    if isinstance(value, dict):
        return {key: (item.replace("#/components/schemas/", "#/$defs/") if key == "$ref"
                      else as_local(item)) for key, item in value.items()}
    if isinstance(value, list):
        return [as_local(item) for item in value]
    return value


async def test_numeric_bounds_in_the_schema_match_the_model(client: httpx.AsyncClient) -> None:
    """A value the schema refuses the model refuses too, and the other way round, at
    each side of every numeric bound."""
    openapi = await document(client)
    components = as_local(openapi["components"]["schemas"])
    validator = jsonschema_rs.validator_for({**components["ResponsesRequest"], "$defs": components})
    for field, values in {
        "top_k": [-2, -1, 1 << 20, (1 << 20) + 1], "temperature": [-0.1, 0, 2, 2.1],
        "max_output_tokens": [0, 1, 1 << 20, (1 << 20) + 1], "priority": [-1001, 1000, 1001],
        "thinking_token_budget": [-2, -1, 1 << 20, (1 << 20) + 1],
        "top_logprobs": [-1, 0, 20, 21], "seed": [-(2**63) - 1, 2**63 - 1, 2**63],
        "repetition_penalty": [0, 10, 10.5], "stop_token_ids": [[-1], [0], [2**31]],
    }.items():
        for value in values:
            body = {"model": "m", "input": "hi", field: value}
            try:
                ResponsesRequest.model_validate(body)
                model_takes = True
            except Exception:
                model_takes = False
            assert validator.is_valid(body) == model_takes, (field, value)
