"""load_model: spec resolution and what a LoadedModel carries."""

from __future__ import annotations

import pytest
import torch

import kernels
from workers.model import DEFAULT_MODEL, CausalLM, load_model


def test_loaded_model_parts(smollm2):
    assert isinstance(smollm2.model, CausalLM)
    assert smollm2.model.ops.backend == kernels.cpu_backend()
    assert not any(p.requires_grad for p in smollm2.model.parameters())
    assert smollm2.model.embed_tokens.weight.dtype == torch.float32
    assert smollm2.config is smollm2.model.config


@pytest.mark.parametrize("spec", ["no-such-model", "/no/such/path.gguf", "README.md"])
def test_unknown_specs_are_rejected(spec):
    with pytest.raises(ValueError, match=DEFAULT_MODEL):
        load_model(spec)


def test_tiny_model_in_bfloat16(tiny):
    loaded = load_model(tiny.directory, dtype=torch.bfloat16)
    assert loaded.model.embed_tokens.weight.dtype == torch.bfloat16
    assert loaded.model.cos_sin_cache.dtype == torch.bfloat16
