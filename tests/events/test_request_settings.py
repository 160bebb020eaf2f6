"""Each request setting's bounds and special values, as the request event applies them:
the one place they are defined (events/request_settings.py)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from events import RequestAccepted, SamplingSettings
from events.request_settings import (
    BUDGET_MESSAGE,
    FIXED_MESSAGE_ERROR,
    LOGIT_BIAS_LIMIT,
    MAX_OUTPUT_TOKENS,
    MAX_THINKING_TOKEN_BUDGET,
    MAX_TOKEN_ID,
    MAX_TOKEN_ID_ENTRIES,
    MAX_TOP_K,
    PRIORITY_LIMIT,
)


def accepted(**fields: object) -> RequestAccepted:
    return RequestAccepted(response_id="resp_1", seq=0, model="m", messages=(), **fields)


@pytest.mark.parametrize(("sent", "carried"), [(None, None), (-1, None), (0, 0), (7, 7)])
def test_thinking_budget_minus_one_is_unlimited(sent: object, carried: object) -> None:
    assert accepted(thinking_token_budget=sent).thinking_token_budget == carried


@pytest.mark.parametrize("budget", [-2, 1.5, True, "5", -100])
def test_thinking_budget_refusal_carries_the_contract_message(budget: object) -> None:
    with pytest.raises(ValidationError) as caught:
        accepted(thinking_token_budget=budget)
    (error,) = caught.value.errors()
    assert (error["type"], error["msg"]) == (FIXED_MESSAGE_ERROR, BUDGET_MESSAGE)


@pytest.mark.parametrize(("sent", "carried"), [(-1, 0), (0, 0), (40, 40)])
def test_top_k_minus_one_is_off(sent: int, carried: int) -> None:
    assert SamplingSettings(top_k=sent).top_k == carried


def test_logit_bias_keys_become_token_ids_and_values_are_clamped() -> None:
    settings = SamplingSettings(logit_bias={"17": 250, 3: -500.0, "9": 1.5})
    assert settings.logit_bias == {17: LOGIT_BIAS_LIMIT, 3: -LOGIT_BIAS_LIMIT, 9: 1.5}


def test_stop_takes_one_string_or_several() -> None:
    assert SamplingSettings(stop="\n").stop == ("\n",)
    assert SamplingSettings(stop=["a", "b"]).stop == ("a", "b")
    assert SamplingSettings(stop_token_ids=[2, 3]).stop_token_ids == (2, 3)


def test_the_event_decodes_what_it_encodes() -> None:
    event = accepted(sampling=SamplingSettings(top_k=-1, logit_bias={"5": 300}, stop="x"),
                     thinking_token_budget=-1)
    assert RequestAccepted.model_validate_json(event.model_dump_json()) == event


@pytest.mark.parametrize(
    ("settings", "field", "says"),
    [
        ({"temperature": 2.5}, "temperature", "less than or equal to 2"),
        ({"top_p": 0}, "top_p", "greater than 0"),
        ({"top_k": -2}, "top_k", "greater than or equal to -1"),
        ({"min_p": 1.5}, "min_p", "less than or equal to 1"),
        ({"presence_penalty": -3}, "presence_penalty", "greater than or equal to -2"),
        ({"repetition_penalty": 0}, "repetition_penalty", "greater than 0"),
        ({"seed": 2**63}, "seed", "less than or equal to"),
        ({"max_output_tokens": 0}, "max_output_tokens", "greater than or equal to 1"),
        ({"top_logprobs": 21}, "top_logprobs", "less than or equal to 20"),
        ({"stop": ["ok", ""]}, "stop", "must not be empty"),
        ({"stop": 5}, "stop", "a string or a list of strings"),
        ({"stop_token_ids": [-1]}, "stop_token_ids", "non-negative"),
        ({"logit_bias": {"x": 1}}, "logit_bias", "integer token ids"),
        ({"logit_bias": {"-5": 1}}, "logit_bias", "integer token ids"),
        ({"top_k": MAX_TOP_K + 1}, "top_k", f"less than or equal to {MAX_TOP_K}"),
        ({"top_k": 10**30}, "top_k", f"less than or equal to {MAX_TOP_K}"),
        ({"max_output_tokens": MAX_OUTPUT_TOKENS + 1}, "max_output_tokens", "less than or equal"),
        ({"repetition_penalty": 11}, "repetition_penalty", "less than or equal to 10"),
        ({"temperature": float("nan")}, "temperature", "finite number"),
        ({"top_p": float("inf")}, "top_p", "finite number"),
        ({"seed": -(2**63) - 1}, "seed", "greater than or equal to"),
        ({"stop_token_ids": [MAX_TOKEN_ID + 1]}, "stop_token_ids", "at most"),
        ({"stop_token_ids": list(range(MAX_TOKEN_ID_ENTRIES + 1))}, "stop_token_ids", "at most"),
        ({"logit_bias": {str(10**30): 1}}, "logit_bias", "at most"),
        ({"logit_bias": {str(i): 1 for i in range(MAX_TOKEN_ID_ENTRIES + 1)}}, "logit_bias", "at most"),
    ],
)
def test_out_of_range_settings_name_the_field(settings: dict[str, object], field: str,
                                              says: str) -> None:
    with pytest.raises(ValidationError) as caught:
        SamplingSettings.model_validate(settings)
    (error,) = caught.value.errors()
    assert error["loc"][0] == field and says in error["msg"], error


def test_the_largest_settings_are_accepted() -> None:
    settings = SamplingSettings(top_k=MAX_TOP_K, max_output_tokens=MAX_OUTPUT_TOKENS,
                                stop_token_ids=[MAX_TOKEN_ID], logit_bias={MAX_TOKEN_ID: 1})
    assert settings.top_k == MAX_TOP_K
    assert accepted(thinking_token_budget=MAX_THINKING_TOKEN_BUDGET).thinking_token_budget == (
        MAX_THINKING_TOKEN_BUDGET)


def test_a_budget_past_the_cap_names_the_cap() -> None:
    with pytest.raises(ValidationError) as caught:
        accepted(thinking_token_budget=MAX_THINKING_TOKEN_BUDGET + 1)
    (error,) = caught.value.errors()
    assert str(MAX_THINKING_TOKEN_BUDGET) in error["msg"]


@pytest.mark.parametrize("priority", [-PRIORITY_LIMIT - 1, PRIORITY_LIMIT + 1, 10**30])
def test_priority_is_bounded(priority: int) -> None:
    with pytest.raises(ValidationError) as caught:
        accepted(priority=priority)
    assert caught.value.errors()[0]["loc"] == ("priority",)
