"""qwen3_moe against transformers' Qwen3MoeForCausalLM: tiny random checkpoints
(moe_checkpoints.py) from the folder on the CPU path (fused ops and torch ops) and on the
Triton path (interpreted here), and llama.cpp's GGUF files of one; the tolerances are
test_family_parity.py's."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from tests.llama_cpp_tools import build_tools_available
from workers.model.hf_config import read_hf_config
from workers.model.hf_files import read_config_json

from .family_checkpoints import PROMPT
from .moe_checkpoints import SPECS, MoeStore
from .test_family_parity import (
    BACKENDS,
    FOLDER_TOLERANCE,
    GGUF_TOLERANCE,
    TRITON_NEW_TOKENS,
    _difference,
    _prefill_and_greedy,
)


@pytest.fixture(scope="session")
def moe_models(tmp_path_factory) -> MoeStore:
    return MoeStore(tmp_path_factory.mktemp("qwen3_moe"))


def test_config_names_the_sparse_layers(moe_models):
    config = read_hf_config(read_config_json(moe_models.directory("qwen3_moe")))
    assert (config.num_experts, config.num_experts_per_tok, config.norm_topk_prob) == (4, 2, True)
    assert [config.is_moe(layer) for layer in range(3)] == [True, True, True]
    mixed = read_hf_config(read_config_json(moe_models.directory("qwen3_moe_mixed")))
    assert not mixed.norm_topk_prob
    assert [mixed.is_moe(layer) for layer in range(4)] == [False, True, False, False]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", list(SPECS))
def test_folder_matches_transformers(moe_models, name, backend):
    expected = moe_models.reference(name)
    logits, greedy = _prefill_and_greedy(moe_models.directory(name), backend)
    difference = _difference(logits, expected.logits, len(PROMPT))
    print(f"{name} folder {backend}: max abs logit difference {difference:.3g}")
    assert difference < FOLDER_TOLERANCE
    assert greedy == expected.greedy


@pytest.mark.skipif(
    os.environ.get("TRITON_INTERPRET") != "1" and not torch.cuda.is_available(),
    reason="the Triton path needs CUDA or TRITON_INTERPRET=1",
)
def test_triton_folder_matches_transformers(moe_models):
    pytest.importorskip("triton")
    expected = moe_models.reference("qwen3_moe")
    logits, greedy = _prefill_and_greedy(moe_models.directory("qwen3_moe"), "triton",
                                         new_tokens=TRITON_NEW_TOKENS)
    difference = _difference(logits, expected.logits, len(PROMPT))
    print(f"qwen3_moe folder triton: max abs logit difference {difference:.3g}")
    assert difference < FOLDER_TOLERANCE
    assert greedy == expected.greedy[:TRITON_NEW_TOKENS]


@pytest.mark.parametrize("kind", ["F16", "Q8_0", "Q4_K_M"])
def test_gguf_matches_transformers(moe_models, kind):
    if kind == "Q4_K_M" and (reason := build_tools_available()) is not None:
        pytest.skip(reason)
    path: Path = moe_models.gguf(kind)
    expected = moe_models.reference("qwen3_moe")
    logits, greedy = _prefill_and_greedy(path, "auto", weights="auto")
    difference = _difference(logits, expected.logits, len(PROMPT))
    scale = expected.logits.abs().max().item()
    print(f"qwen3_moe {kind}: max abs logit difference {difference:.3g} (largest {scale:.3g})")
    assert difference < GGUF_TOLERANCE[kind] * scale
    if kind == "F16":
        assert greedy == expected.greedy
