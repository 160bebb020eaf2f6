"""SamplingParams and EngineConfig: normalization and rejection of invalid settings."""

from __future__ import annotations

import pytest

from workers.engine.config import EngineConfig
from workers.engine.sampling_params import SamplingParams


def test_off_values_are_normalized():
    params = SamplingParams(top_k=-1, thinking_token_budget=-1)
    assert params.top_k == 0
    assert params.thinking_token_budget is None


def test_logit_bias_is_clamped_and_keyed_by_int():
    params = SamplingParams(logit_bias={"5": 250.0, 7: -300.0, 9: 1.5})
    assert params.logit_bias == {5: 100.0, 7: -100.0, 9: 1.5}


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
        {"top_k": -2},
        {"min_p": 1.5},
        {"presence_penalty": 2.5},
        {"frequency_penalty": -3.0},
        {"repetition_penalty": 0.0},
        {"max_tokens": 0},
        {"logprobs": 21},
        {"thinking_token_budget": -2},
        {"thinking_token_budget": 1.5},
        {"thinking_token_budget": True},
        {"stop": [""]},
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
