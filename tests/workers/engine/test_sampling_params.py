"""SamplingParams and EngineConfig: built from the request event as it is, and invalid
settings refused for direct engine users."""

from __future__ import annotations

from typing import Any

import pytest

from events import RequestAccepted, SamplingSettings
from workers.engine.config import EngineConfig
from workers.engine.sampling_params import SamplingParams, sampling_params_of


def test_built_from_the_request_event_with_its_settings_as_they_are() -> None:
    sampling = SamplingSettings(temperature=0.3, top_k=-1, stop="x", logit_bias={"5": 250.0},
                                max_output_tokens=9, top_logprobs=2)
    request = RequestAccepted(response_id="resp_1", seq=0, model="m", messages=(),
                              sampling=sampling, thinking_token_budget=-1, priority=2,
                              cache_salt="s", owner="o")
    grammar: Any = object()  # a compiled grammar is only carried here, never looked into
    params = sampling_params_of(request, grammar)
    assert params.sampling is request.sampling
    assert (params.sampling.top_k, params.sampling.stop, params.sampling.logit_bias) == (
        0, ("x",), {5: 100.0})
    assert params.thinking_token_budget is None
    assert params.grammar is grammar
    assert (params.priority, params.owner) == (2, "o")
    assert params.cache_salt == "1:o:s"  # the prefix cache is scoped by owner, then salt


def test_of_takes_settings_by_name_and_the_engine_fields_beside_them() -> None:
    params = SamplingParams.of(temperature=0.0, stop=["x"], thinking_token_budget=3,
                               priority=-1, cache_salt="c", owner="o")
    assert params.sampling == SamplingSettings(temperature=0.0, stop=("x",))
    assert (params.thinking_token_budget, params.priority, params.cache_salt, params.owner) == (
        3, -1, "c", "o")
    assert SamplingParams().sampling == SamplingSettings()


def test_of_refuses_a_name_the_settings_do_not_have() -> None:
    # SamplingSettings ignores unknown keys, so a misspelled setting would otherwise
    # sample with the default without a word.
    with pytest.raises(TypeError, match="'temprature'"):
        SamplingParams.of(temprature=0.0)


def test_greedy_and_penalty_flags() -> None:
    assert SamplingParams.of(temperature=0.0).greedy
    assert not SamplingParams.of(temperature=0.3).greedy
    assert not SamplingParams().has_penalties
    assert SamplingParams.of(repetition_penalty=1.1).has_penalties


def test_ending_tokens() -> None:
    eos = frozenset({2})
    params = SamplingParams.of(stop_token_ids=[7, 2])
    assert params.ending_token_ids(eos) == [2, 7]
    assert params.ends_sequence(7, eos) and params.ends_sequence(2, eos)
    ignoring = SamplingParams.of(stop_token_ids=[7], ignore_eos=True)
    assert ignoring.ending_token_ids(eos) == [7]
    assert not ignoring.ends_sequence(2, eos)


@pytest.mark.parametrize(
    "settings",
    [
        {"temperature": -0.1},
        {"temperature": 2.5},
        {"top_p": 0.0},
        {"top_p": 1.5},
        {"top_k": -2},
        {"min_p": 1.5},
        {"presence_penalty": 2.5},
        {"frequency_penalty": -3.0},
        {"repetition_penalty": 0.0},
        {"max_output_tokens": 0},
        {"top_logprobs": 21},
        {"thinking_token_budget": -1},
        {"logit_bias": {-5: 1.0}},
        {"stop": ("",)},
        {"stop_token_ids": (-1,)},
    ],
)
def test_invalid_sampling_params_are_rejected(settings: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        SamplingParams.of(**settings)


@pytest.mark.parametrize(
    "settings",
    [
        {"block_size": 0},
        {"num_kv_blocks": 0},
        {"kv_cache_memory_fraction": 0.0},
        {"max_num_seqs": 0},
        {"kernels": "cuda"},
        {"dtype": "int8"},
        {"num_threads": 0},
    ],
)
def test_invalid_engine_config_is_rejected(settings: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        EngineConfig(**settings)
