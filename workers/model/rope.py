"""The rotary cos/sin table in the layout the kernels read: row p is cat(cos, sin) at position p.

Scalings (a checkpoint's `rope_scaling` / `rope_parameters`): `linear`, `llama3`, `yarn`,
`longrope` (`su`), and `frequency_factors` (a GGUF file's `rope_freqs` tensor, which
llama.cpp's converter writes for llama3 scaling: the base frequencies divided by it).
A partial rotary head (Phi-4-mini) gets cos 1 and sin 0 past its rotated pairs, over the
head layout `rotary_first_rows` gives its q/k rows, so the kernels rotate whole heads.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from workers.model.config import ModelConfig

SCALINGS = ("default", "linear", "llama3", "yarn", "longrope", "su", "frequency_factors")


def _scaling_type(scaling: dict[str, Any] | None) -> str:
    if not scaling:
        return "default"
    rope_type = str(scaling.get("rope_type", scaling.get("type", "default")))
    if rope_type not in SCALINGS:
        raise ValueError(f"unsupported rope scaling type {rope_type!r}; supported: {SCALINGS}")
    return rope_type


def inverse_frequencies(
    config: ModelConfig, theta: float | None = None, scaling: dict[str, Any] | None = None,
    long: bool = False,
) -> torch.Tensor:
    """Per-pair rotation frequencies [rotary_dim / 2] with the rope scaling applied (the
    config's unless `theta` / `scaling` are given: Gemma 3's local layers). `long` picks
    longrope's long factors.

    Everything is fp32, not fp64, on purpose: that is what the reference implementation
    does, and logit parity depends on matching its rounding.
    """
    dim = config.rotary_dim
    base = config.rope_theta if theta is None else theta
    scaling = config.rope_scaling if theta is None and scaling is None else scaling
    exponents = torch.arange(0, dim, 2, dtype=torch.int64).float() / dim
    rope_type = _scaling_type(scaling)
    if rope_type in ("longrope", "su"):
        assert scaling is not None
        factors = scaling["long_factor" if long else "short_factor"]
        return 1.0 / (torch.tensor(factors, dtype=torch.float32) * base**exponents)
    inv_freq = 1.0 / (base**exponents)
    if scaling is None or rope_type == "default":
        return inv_freq
    if rope_type == "linear":
        return inv_freq / float(scaling["factor"])
    if rope_type == "frequency_factors":
        return inv_freq / torch.tensor(scaling["factors"], dtype=torch.float32)
    if rope_type == "llama3":
        return _llama3_frequencies(inv_freq, scaling)
    return _yarn_frequencies(config, base, scaling)


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


def _yarn_frequencies(config: ModelConfig, base: float, scaling: dict[str, Any]) -> torch.Tensor:
    # YaRN: interpolate the low frequencies by `factor`, keep the high ones, ramp between
    # the dimensions that turn beta_fast and beta_slow times over the original context.
    dim = config.rotary_dim
    factor = float(scaling["factor"])
    old_context = float(
        scaling.get("original_max_position_embeddings") or config.max_position_embeddings
    )
    beta_fast = float(scaling.get("beta_fast") or 32)
    beta_slow = float(scaling.get("beta_slow") or 1)

    def correction_dim(rotations: float) -> float:
        return (dim * math.log(old_context / (rotations * 2 * math.pi))) / (2 * math.log(base))

    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if scaling.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001
    ramp = ((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low)).clamp(0, 1)
    positions = base ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim)
    extrapolation = 1 - ramp
    return (1.0 / (factor * positions)) * (1 - extrapolation) + (1.0 / positions) * extrapolation


def attention_factor(config: ModelConfig, scaling: dict[str, Any] | None) -> float:
    """What yarn and longrope multiply cos and sin by (1 for the other scalings)."""
    rope_type = _scaling_type(scaling)
    if scaling is None or rope_type not in ("yarn", "longrope", "su"):
        return 1.0
    if scaling.get("attention_factor") is not None:
        return float(scaling["attention_factor"])
    old_context = float(
        scaling.get("original_max_position_embeddings") or config.max_position_embeddings
    )
    factor = scaling.get("factor")
    if factor is None:
        factor = config.max_position_embeddings / old_context
    factor = float(factor)
    if rope_type == "yarn":
        mscale, mscale_all_dim = scaling.get("mscale"), scaling.get("mscale_all_dim")

        def get_mscale(scale: float, m: float = 1.0) -> float:
            return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

        if mscale and mscale_all_dim:
            return get_mscale(factor, float(mscale)) / get_mscale(factor, float(mscale_all_dim))
        return get_mscale(factor)
    if factor <= 1.0:
        return 1.0
    return math.sqrt(1 + math.log(factor) / math.log(old_context))


def _table(config: ModelConfig, positions: torch.Tensor, inv_freq: torch.Tensor,
           factor: float) -> torch.Tensor:
    angles = torch.outer(positions, inv_freq)
    cos, sin = angles.cos(), angles.sin()
    if factor != 1.0:
        cos, sin = cos * factor, sin * factor
    passed = (config.head_dim - config.rotary_dim) // 2
    if passed:
        cos = torch.cat((cos, torch.ones(len(positions), passed)), dim=-1)
        sin = torch.cat((sin, torch.zeros(len(positions), passed)), dim=-1)
    return torch.cat((cos, sin), dim=-1)


def build_cos_sin_cache(
    config: ModelConfig, device: torch.device | str, dtype: torch.dtype, local: bool = False
) -> torch.Tensor:
    """[max_position_embeddings, head_dim], computed in fp32 and then cast to `dtype`.
    `local`: the table of Gemma 3's sliding layers (their own base, no scaling)."""
    positions = torch.arange(config.max_position_embeddings, dtype=torch.float32)
    if local and config.rope_local_theta is not None:
        inv_freq = inverse_frequencies(config, config.rope_local_theta, {"rope_type": "default"})
        cache = _table(config, positions, inv_freq, 1.0)
        return cache.to(device=device, dtype=dtype)
    scaling = config.rope_scaling
    factor = attention_factor(config, scaling)
    if _scaling_type(scaling) in ("longrope", "su"):
        # Short factors up to the original context, long ones past it: per position, so a
        # row's rotation never depends on the other rows of its batch. Within the
        # original context this is what transformers computes.
        assert scaling is not None
        original = min(int(scaling["original_max_position_embeddings"]), len(positions))
        short = _table(config, positions[:original], inverse_frequencies(config), factor)
        long = _table(
            config, positions[original:], inverse_frequencies(config, long=True), factor
        )
        return torch.cat((short, long)).to(device=device, dtype=dtype)
    cache = _table(config, positions, inverse_frequencies(config), factor)
    return cache.to(device=device, dtype=dtype)


def rotary_first_rows(num_heads: int, head_dim: int, rotary_dim: int) -> torch.Tensor:
    """Row order for q or k rows [num_heads * head_dim] that puts each head's rotated pairs
    (i, i + rotary_dim / 2) at (i, i + head_dim / 2), as the kernels rotate, and the
    passed-through dimensions between: a permutation of q and k alike, so q.k is unchanged."""
    half, passed = rotary_dim // 2, (head_dim - rotary_dim) // 2
    head = torch.cat((
        torch.arange(0, half), torch.arange(rotary_dim, rotary_dim + passed),
        torch.arange(half, rotary_dim), torch.arange(rotary_dim + passed, head_dim),
    ))
    return torch.cat([head + h * head_dim for h in range(num_heads)])
