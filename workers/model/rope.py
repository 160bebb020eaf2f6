"""The rotary cos/sin table in the layout the kernels read: row p is cat(cos, sin) at position p."""

from __future__ import annotations

import math
from typing import Any

import torch

from workers.model.config import ModelConfig


def inverse_frequencies(config: ModelConfig) -> torch.Tensor:
    """Per-pair rotation frequencies [D/2], with the checkpoint's rope scaling applied.

    Everything is fp32, not fp64, on purpose: that is what the reference implementation
    does, and logit parity depends on matching its rounding.
    """
    dim = config.head_dim
    exponents = torch.arange(0, dim, 2, dtype=torch.float32) / dim
    inv_freq = 1.0 / (config.rope_theta**exponents)
    scaling = config.rope_scaling
    if not scaling:
        return inv_freq
    rope_type = scaling.get("rope_type", scaling.get("type", "default"))
    if rope_type == "default":
        return inv_freq
    if rope_type == "linear":
        return inv_freq / float(scaling["factor"])
    if rope_type == "llama3":
        return _llama3_frequencies(inv_freq, scaling)
    raise ValueError(f"unsupported rope scaling type {rope_type!r}; supported: linear, llama3")


def _llama3_frequencies(inv_freq: torch.Tensor, scaling: dict[str, Any]) -> torch.Tensor:
    # Llama 3.1 keeps high frequencies, divides low ones by `factor`, and blends the band
    # between so long-context positions stay distinguishable (as Hugging Face does).
    factor = float(scaling["factor"])
    low_freq_factor = float(scaling["low_freq_factor"])
    high_freq_factor = float(scaling["high_freq_factor"])
    old_context = float(scaling["original_max_position_embeddings"])
    low_freq_wavelen = old_context / low_freq_factor
    high_freq_wavelen = old_context / high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth = (old_context / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    blended = (1 - smooth) * scaled / factor + smooth * scaled
    is_medium = (wavelen >= high_freq_wavelen) & (wavelen <= low_freq_wavelen)
    return torch.where(is_medium, blended, scaled)


def build_cos_sin_cache(
    config: ModelConfig, device: torch.device | str, dtype: torch.dtype
) -> torch.Tensor:
    """[max_position_embeddings, head_dim], computed in fp32 and then cast to `dtype`."""
    inv_freq = inverse_frequencies(config)
    positions = torch.arange(config.max_position_embeddings, dtype=torch.float32)
    angles = torch.outer(positions, inv_freq)
    cache = torch.cat((angles.cos(), angles.sin()), dim=-1)
    return cache.to(device=device, dtype=dtype)
