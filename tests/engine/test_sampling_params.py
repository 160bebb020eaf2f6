"""SamplingParams and EngineConfig: built from the request event as it is, and invalid
settings refused for direct engine users."""

from __future__ import annotations

from dataclasses import fields

import pytest

from events import RequestAccepted, SamplingSettings
from workers.engine.config import EngineConfig
from workers.engine.sampling_params import SamplingParams, sampling_params_of


def test_built_from_the_request_event_field_for_field():
    sampling = SamplingSettings(temperature=0.3, top_k=-1, stop="x", logit_bias={"5": 250.0},
                                max_output_tokens=9, top_logprobs=2)
    request = RequestAccepted(response_id="resp_1", seq=0, model="m", messages=(),
                              sampling=sampling, thinking_token_budget=-1, priority=2,
                              cache_salt="s", owner="o")
    params = sampling_params_of(request, grammar="g")
    assert {name: getattr(params, name) for name in SamplingSettings.model_fields} == dict(sampling)
    assert (params.top_k, params.stop, params.logit_bias) == (0, ("x",), {5: 100.0})
    assert params.thinking_token_budget is None
    assert (params.priority, params.grammar, params.owner) == (2, "g", "o")
    assert params.cache_salt == "1:o:s"  # the prefix cache is scoped by owner, then salt


def test_every_event_setting_has_an_engine_field():
    assert set(SamplingSettings.model_fields) <= {field.name for field in fields(SamplingParams)}


def test_greedy_and_penalty_flags():
    assert SamplingParams(temperature=0.0).greedy
    assert not SamplingParams(temperature=0.3).greedy
    assert not SamplingParams().has_penalties
    assert SamplingParams(repetition_penalty=1.1).has_penalties


@pytest.mark.parametrize(
    "settings",
    [
        {"temperature": -0.1},
        {"top_p": 0.0},
        {"top_p": 1.5},
        {"top_k": -1},
        {"min_p": 1.5},
        {"presence_penalty": 2.5},
        {"frequency_penalty": -3.0},
        {"repetition_penalty": 0.0},
        {"max_output_tokens": 0},
        {"top_logprobs": 21},
        {"thinking_token_budget": -1},
        {"logit_bias": {5: 250.0}},
        {"stop": ("",)},
    ],
)
def test_invalid_sampling_params_are_rejected(settings):
    with pytest.raises(ValueError):
        SamplingParams(**settings)


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
def test_invalid_engine_config_is_rejected(settings):
    with pytest.raises(ValueError):
        EngineConfig(**settings)
