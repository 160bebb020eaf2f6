"""A request's settings reach the request event through the event's own types: the same
400s as before, and -1, top_k and logit_bias normalized once (no server)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from api.errors import APIError, validation_error
from api.lowering.accept import SAMPLING_FIELDS, accept, sampling_of
from api.schema.request import FieldRejected, ResponsesRequest
from events.request_settings import BUDGET_MESSAGE


def request(**body: Any) -> ResponsesRequest:
    return ResponsesRequest.model_validate({"model": "m", "input": "hi", **body})


def refusal(**body: Any) -> APIError:
    try:
        request(**body)
    except FieldRejected as error:
        return APIError(400, error.message, param=error.param)
    except ValidationError as error:
        return validation_error(error)
    raise AssertionError(f"{body} was accepted")


def test_every_sampling_setting_is_a_request_field() -> None:
    assert set(SAMPLING_FIELDS) <= set(ResponsesRequest.model_fields)


@pytest.mark.parametrize("budget", [-2, 1.5, True, "5", -100])
def test_bad_thinking_budget_gets_the_contract_message(budget: object) -> None:
    error = refusal(thinking_token_budget=budget)
    assert (error.message, error.param) == (BUDGET_MESSAGE, "thinking_token_budget")


@pytest.mark.parametrize(("budget", "carried"), [(None, None), (-1, None), (0, 0), (5, 5)])
def test_thinking_budget_reaches_the_event(budget: object, carried: object) -> None:
    fields = {} if budget is None else {"thinking_token_budget": budget}
    assert accept(request(**fields), "resp_t", owner="shared").thinking_token_budget == carried


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"temperature": 2.5}, "Invalid value for 'temperature': Input should be less than or equal to 2"),
        ({"temperature": "hot"}, "Invalid value for 'temperature': Input should be a valid number"),
        ({"top_p": 0}, "Invalid value for 'top_p': Input should be greater than 0"),
        ({"top_k": -2}, "Invalid value for 'top_k': Input should be greater than or equal to -1"),
        ({"stop": ["ok", ""]}, "Invalid value for 'stop': stop strings must not be empty"),
        ({"stop": ["ok", 3]}, "Invalid value for 'stop[1]': Input should be a valid string"),
        ({"stop_token_ids": [-1]}, "Invalid value for 'stop_token_ids': token ids are non-negative integers"),
        ({"stop_token_ids": 2}, "Invalid value for 'stop_token_ids': Input should be a valid list"),
        ({"logit_bias": {"a": 1}}, "Invalid value for 'logit_bias': keys must be integer token ids"),
        ({"logit_bias": {"17": "x"}}, "Invalid value for 'logit_bias.17': Input should be a valid number"),
        ({"logit_bias": [1]}, "Invalid value for 'logit_bias': Input should be a valid dictionary"),
        ({"top_logprobs": 21}, "Invalid value for 'top_logprobs': Input should be less than or equal to 20"),
        ({"max_output_tokens": 0}, "Invalid value for 'max_output_tokens': Input should be greater than or equal to 1"),
        ({"seed": True}, "Invalid value for 'seed': Input should be a valid integer"),
    ],
)
def test_sampling_errors_name_the_field(fields: dict[str, Any], message: str) -> None:
    assert refusal(**fields).message == message


def test_sampling_comes_from_the_request_then_the_model_then_the_event() -> None:
    sampling = sampling_of(
        request(temperature=0.3, top_k=-1, stop="\n", logit_bias={"17": 250}, stop_token_ids=[2]),
        {"temperature": 0.2, "top_p": 0.9},
    )
    assert (sampling.temperature, sampling.top_p, sampling.min_p) == (0.3, 0.9, 0.0)
    assert (sampling.top_k, sampling.stop, sampling.stop_token_ids) == (0, ("\n",), (2,))
    assert sampling.logit_bias == {17: 100.0}
    assert sampling.top_logprobs is None


def test_logprobs_only_when_included() -> None:
    include = ["message.output_text.logprobs"]
    assert sampling_of(request(include=include)).top_logprobs == 0
    assert sampling_of(request(include=include, top_logprobs=3)).top_logprobs == 3
    assert sampling_of(request(top_logprobs=3)).top_logprobs is None
