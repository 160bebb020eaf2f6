"""A plain dense Llama/Qwen3 forward in fp64, written from the papers' equations, for the tests.

It shares no code with workers/ or kernels/: no paging, no fused weights, no kernels.
"""

from __future__ import annotations

import math

import torch


def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return x / torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps) * weight


def _inverse_frequencies(config: dict, head_dim: int) -> torch.Tensor:
    theta = config["rope_theta"]
    frequencies = [theta ** (-2 * i / head_dim) for i in range(head_dim // 2)]
    scaling = config.get("rope_scaling")
    if scaling and scaling["rope_type"] == "llama3":
        factor, low, high = (
            scaling["factor"],
            scaling["low_freq_factor"],
            scaling["high_freq_factor"],
        )
        old = scaling["original_max_position_embeddings"]
        scaled = []
        for freq in frequencies:
            wavelength = 2 * math.pi / freq
            if wavelength < old / high:
                scaled.append(freq)
            elif wavelength > old / low:
                scaled.append(freq / factor)
            else:
                smooth = (old / wavelength - low) / (high - low)
                scaled.append((1 - smooth) * freq / factor + smooth * freq)
        frequencies = scaled
    return torch.tensor(frequencies, dtype=torch.float64)


def _rope(x: torch.Tensor, positions: torch.Tensor, inv_freq: torch.Tensor) -> torch.Tensor:
    """x [T, H, D]: rotate the pair (x[i], x[i + D/2]) by position * inv_freq[i]."""
    angles = positions[:, None].double() * inv_freq[None, :]
    cos, sin = angles.cos()[:, None, :], angles.sin()[:, None, :]
    half = x.shape[-1] // 2
    first, second = x[..., :half], x[..., half:]
    return torch.cat((first * cos - second * sin, second * cos + first * sin), dim=-1)


def dense_logits(config: dict, state: dict[str, torch.Tensor], ids: list[int]) -> torch.Tensor:
    """Logits [T, V] (fp64) for every position of `ids`, attending causally over all of them."""
    w = {name: tensor.double() for name, tensor in state.items()}
    hidden_size, heads = config["hidden_size"], config["num_attention_heads"]
    kv_heads = config["num_key_value_heads"]
    head_dim = config.get("head_dim", hidden_size // heads)
    eps = config["rms_norm_eps"]
    qwen3 = config["model_type"] == "qwen3"
    tokens = len(ids)
    positions = torch.arange(tokens)
    inv_freq = _inverse_frequencies(config, head_dim)
    causal = torch.ones(tokens, tokens, dtype=torch.bool).tril()

    def linear(x: torch.Tensor, name: str) -> torch.Tensor:
        out = x @ w[f"{name}.weight"].T
        return out + w[f"{name}.bias"] if f"{name}.bias" in w else out

    hidden = w["model.embed_tokens.weight"][torch.tensor(ids)]
    for layer in range(config["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        x = _rms_norm(hidden, w[p + "input_layernorm.weight"], eps)
        q = linear(x, p + "self_attn.q_proj").view(tokens, heads, head_dim)
        k = linear(x, p + "self_attn.k_proj").view(tokens, kv_heads, head_dim)
        v = linear(x, p + "self_attn.v_proj").view(tokens, kv_heads, head_dim)
        if qwen3:
            q = _rms_norm(q, w[p + "self_attn.q_norm.weight"], eps)
            k = _rms_norm(k, w[p + "self_attn.k_norm.weight"], eps)
        q, k = _rope(q, positions, inv_freq), _rope(k, positions, inv_freq)
        group = heads // kv_heads
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        scores = torch.einsum("thd,shd->hts", q, k) / math.sqrt(head_dim)
        scores = scores.masked_fill(~causal, float("-inf"))
        attended = torch.einsum("hts,shd->thd", scores.softmax(dim=-1), v)
        hidden = hidden + linear(attended.reshape(tokens, heads * head_dim), p + "self_attn.o_proj")
        x = _rms_norm(hidden, w[p + "post_attention_layernorm.weight"], eps)
        gate, up = linear(x, p + "mlp.gate_proj"), linear(x, p + "mlp.up_proj")
        hidden = hidden + linear(gate * torch.sigmoid(gate) * up, p + "mlp.down_proj")
    hidden = _rms_norm(hidden, w["model.norm.weight"], eps)
    head = w.get("lm_head.weight", w["model.embed_tokens.weight"])
    return hidden @ head.T
