"""Structured output end to end with the SDK in strict mode: JSON schemas, responses.parse,
and vLLM's structured_outputs (choice, regex, grammar), all enforced by constrained decoding."""

from __future__ import annotations

import json
import re
from typing import Any, Literal

import httpx
import pytest
from openai import OpenAI
from pydantic import BaseModel, ConfigDict, Field

from tests.conftest import DEFAULT_MODEL, Stack
from tests.e2e.test_sdk import check_stream_invariants


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class Person(Strict):
    name: str = Field(max_length=20)
    age: int


class Colour(Strict):
    colour: Literal["red", "green", "blue"]


class Check(Strict):
    passed: bool
    score: int = Field(ge=0, le=100)


class Primes(Strict):
    primes: list[int] = Field(min_length=1, max_length=4)


class Address(Strict):
    city: str = Field(max_length=20)
    zip_code: str = Field(pattern=r"^[0-9]{5}$")


class Customer(Strict):
    name: str = Field(max_length=20)
    address: Address


# (question, schema as a pydantic model): five different shapes of JSON.
SCHEMAS: list[tuple[str, type[Strict]]] = [
    ("Describe Alice, who is 30.", Person),
    ("What colour is grass?", Colour),
    ("Did the test pass? Give a score.", Check),
    ("List the first prime numbers.", Primes),
    ("Give a customer who lives in Boston.", Customer),
]


@pytest.fixture(scope="module")
def client(stack: Stack) -> OpenAI:
    return OpenAI(base_url=f"{stack.base_url}/v1", api_key="unused",
                  _strict_response_validation=True, timeout=300)


def create(client: OpenAI, **fields: Any) -> Any:
    return client.responses.create(
        **{"model": DEFAULT_MODEL, "temperature": 0, "max_output_tokens": 64, **fields},
    )


def json_schema_format(model: type[Strict]) -> dict[str, Any]:
    return {"type": "json_schema", "name": model.__name__, "strict": True,
            "schema": model.model_json_schema()}


@pytest.mark.parametrize(("question", "model"), SCHEMAS, ids=[m.__name__ for _, m in SCHEMAS])
def test_json_schema_output_validates(client: OpenAI, question: str, model: type[Strict]) -> None:
    response = create(client, input=question, text={"format": json_schema_format(model)})
    assert response.status == "completed", response.output_text
    model.model_validate_json(response.output_text)
    assert response.text.format.type == "json_schema"
    assert response.text.format.schema_ == model.model_json_schema()


def test_responses_parse_returns_the_object(client: OpenAI) -> None:
    parsed = client.responses.parse(model=DEFAULT_MODEL, input="Describe Bob, who is 42.",
                                    text_format=Person, temperature=0, max_output_tokens=64)
    assert isinstance(parsed.output_parsed, Person)


def test_streamed_json_object_is_a_json_object(client: OpenAI) -> None:
    events = list(create(client, input="Give a JSON object with the name and age of Alice, who is 30.",
                         text={"format": {"type": "json_object"}}, stream=True))
    final = check_stream_invariants(events)
    assert final.status == "completed"
    assert isinstance(json.loads(final.output_text), dict)
    assert final.text.format.type == "json_object"


def test_choice_returns_one_of_the_choices(client: OpenAI) -> None:
    choices = ["positive", "negative", "neutral"]
    response = create(client, input="Classify the sentiment: I love this!",
                      extra_body={"structured_outputs": {"choice": choices}})
    assert response.output_text in choices
    assert response.status == "completed"


def test_regex_and_grammar(client: OpenAI) -> None:
    phone = create(client, input="Give a phone number.",
                   extra_body={"structured_outputs": {"regex": r"\d{3}-\d{3}-\d{4}"}})
    assert re.fullmatch(r"\d{3}-\d{3}-\d{4}", phone.output_text)
    fruit = create(client, input="Pick a fruit.", extra_body={"structured_outputs": {
        "grammar": 'root ::= ("apple" | "pear") " and " ("plum" | "fig")'}})
    assert re.fullmatch(r"(apple|pear) and (plum|fig)", fruit.output_text)


def test_the_constraint_covers_the_answer_not_the_reasoning(client: OpenAI) -> None:
    response = create(client, input="Is water wet?", reasoning={"effort": "low"},
                      extra_body={"thinking_token_budget": 6,
                                  "structured_outputs": {"choice": ["yes", "no"]}})
    reasoning = [item for item in response.output if item.type == "reasoning"]
    assert reasoning and reasoning[0].content[0].text
    assert response.output_text in ("yes", "no")
    assert response.usage.output_tokens_details.reasoning_tokens == 6


def test_a_regex_that_does_not_compile_is_a_400_naming_it(stack: Stack) -> None:
    reply = httpx.post(f"{stack.base_url}/v1/responses", timeout=300, json={
        "model": DEFAULT_MODEL, "input": "hi", "structured_outputs": {"regex": "(unclosed"},
    })
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert error["param"] == "structured_outputs.regex"
    assert "parenthesis" in error["message"]
