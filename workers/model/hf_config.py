"""read_hf_config: a Hugging Face `config.json` to a ModelConfig, per family.

Both layouts are read: the one the published checkpoints carry (`rope_theta`,
`rope_scaling`, Gemma 3's `rope_local_base_freq` and `sliding_window_pattern`) and the one
transformers 5 writes (`rope_parameters`, per layer type where layers differ, and
`layer_types`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from workers.model.config import FULL, SLIDING, ModelConfig
from workers.model.families import ARCHITECTURES, HF_ARCHITECTURES

# Families whose checkpoints tie the output projection to the embeddings unless they say not.
_TIED_BY_DEFAULT = ("gemma3", "smollm3")


def token_ids(value: Any) -> list[int]:
    """An id or a list of ids (as eos_token_id is spelled either way)."""
    if value is None:
        return []
    return [int(v) for v in value] if isinstance(value, list) else [int(value)]


def _rope(raw: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(global rope parameters, local ones), whichever layout the file uses."""
    params = dict(raw.get("rope_parameters") or {})
    if FULL in params or SLIDING in params:
        full, local = dict(params.get(FULL) or {}), dict(params.get(SLIDING) or {})
    else:
        full, local = params, {}
    full.update(raw.get("rope_scaling") or {})
    for key in ("rope_theta", "partial_rotary_factor", "original_max_position_embeddings"):
        if key in raw and raw[key] is not None:
            full.setdefault(key, raw[key])
    if raw.get("rope_local_base_freq") is not None:
        local.setdefault("rope_theta", raw["rope_local_base_freq"])
    return full, local


def _rope_scaling(full: dict[str, Any]) -> dict[str, Any] | None:
    rope_type = full.get("rope_type", full.get("type", "default"))
    if rope_type == "default":
        return None
    return {"rope_type": rope_type, **full}


def _layer_types(raw: dict[str, Any], architecture: str, layers: int) -> tuple[str, ...]:
    """Which layers slide. Qwen2 and SmolLM3 only with `use_sliding_window`; Mistral and
    Phi-3 on every layer when a window is set; Gemma 3 by its pattern."""
    if architecture in ("qwen2", "smollm3") and not raw.get("use_sliding_window"):
        return ()
    if raw.get("layer_types"):
        return tuple(str(kind) for kind in raw["layer_types"])
    if architecture == "gemma3":
        pattern = int(raw.get("sliding_window_pattern") or 6)
        return tuple(SLIDING if (i + 1) % pattern else FULL for i in range(layers))
    if architecture == "qwen2":
        first = int(raw.get("max_window_layers") or 0)
        return tuple(SLIDING if i >= first else FULL for i in range(layers))
    return (SLIDING,) * layers if raw.get("sliding_window") else ()


def _gemma3(raw: dict[str, Any]) -> dict[str, Any]:
    if raw.get("attn_logit_softcapping") is not None:
        raise ValueError("Gemma checkpoints with attn_logit_softcapping are not supported")
    activation = raw.get("hidden_activation") or raw.get("hidden_act") or "gelu_pytorch_tanh"
    if activation not in ("gelu_pytorch_tanh", "gelu_tanh"):
        raise ValueError(f"Gemma 3 with hidden_activation {activation!r} is not supported")
    head_dim = int(raw.get("head_dim") or 256)
    return {
        "attention_scale": float(raw.get("query_pre_attn_scalar") or head_dim) ** -0.5,
        "final_logit_softcapping": raw.get("final_logit_softcapping"),
    }


def _granite(raw: dict[str, Any]) -> dict[str, Any]:
    return {
        "attention_scale": float(raw.get("attention_multiplier", 1.0)),
        "embedding_multiplier": float(raw.get("embedding_multiplier", 1.0)),
        "residual_multiplier": float(raw.get("residual_multiplier", 1.0)),
        "logits_scaling": float(raw.get("logits_scaling", 1.0)),
    }


def _smollm3(raw: dict[str, Any]) -> dict[str, Any]:
    layers = int(raw["num_hidden_layers"])
    flags = raw.get("no_rope_layers")
    if flags is None:
        interval = int(raw.get("no_rope_layer_interval") or 4)
        flags = [int((i + 1) % interval != 0) for i in range(layers)]
    return {"rope_layers": tuple(bool(flag) for flag in flags)}


def _qwen3_moe(raw: dict[str, Any]) -> dict[str, Any]:
    layers = int(raw["num_hidden_layers"])
    step = int(raw.get("decoder_sparse_step") or 1)
    dense = set(raw.get("mlp_only_layers") or ())
    return {
        # transformers 5 writes `num_local_experts`, the published checkpoints `num_experts`.
        "num_experts": int(raw.get("num_experts") or raw.get("num_local_experts") or 0),
        "num_experts_per_tok": int(raw["num_experts_per_tok"]),
        "moe_intermediate_size": int(raw["moe_intermediate_size"]),
        "norm_topk_prob": bool(raw.get("norm_topk_prob", False)),
        "moe_layers": tuple(i not in dense and (i + 1) % step == 0 for i in range(layers)),
    }


# What each family reads beyond the Llama fields.
_FAMILY_FIELDS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "llama": lambda raw: {},
    "mistral": lambda raw: {},
    "qwen3": lambda raw: {},
    "qwen3_moe": _qwen3_moe,
    "qwen2": lambda raw: {"qkv_bias": True},
    "phi3": lambda raw: {},
    "gemma3": _gemma3,
    "smollm3": _smollm3,
    "granite": _granite,
}
if set(_FAMILY_FIELDS) != set(ARCHITECTURES):
    raise RuntimeError(f"hf_config reads {sorted(_FAMILY_FIELDS)}, families are {ARCHITECTURES}")


def read_hf_config(raw: dict[str, Any]) -> ModelConfig:
    architectures = raw.get("architectures") or []
    known = [HF_ARCHITECTURES[a] for a in architectures if a in HF_ARCHITECTURES]
    if not known:
        raise ValueError(
            f"unsupported architectures {architectures}; supported: {sorted(HF_ARCHITECTURES)}"
        )
    architecture = known[0]
    quantization = raw.get("quantization_config")
    if quantization:
        # GPTQ, AWQ, bitsandbytes, fp8 ...: weights under names and layouts the loader
        # does not read.
        method = quantization.get("quant_method") if isinstance(quantization, dict) else None
        raise ValueError(
            f"unsupported quantization {method or 'quantization_config'!r} of a Hugging Face "
            "folder; supported: dense safetensors weights (F32, F16, BF16) in a folder, or a "
            "GGUF file (F32, F16, BF16, Q4_0, Q8_0, K-quants ...)"
        )
    if raw.get("mlp_bias"):
        raise ValueError("checkpoints with mlp_bias are not supported")
    full, local = _rope(raw)
    heads = int(raw["num_attention_heads"])
    hidden = int(raw["hidden_size"])
    layers = int(raw["num_hidden_layers"])
    max_positions = int(raw.get("max_position_embeddings", 2048))
    layer_types = _layer_types(raw, architecture, layers)
    window = raw.get("sliding_window") if SLIDING in layer_types else None
    if window is not None and int(window) >= max_positions:
        window = None  # a window as wide as the context hides nothing
    default_theta = 1_000_000.0 if architecture == "gemma3" else 10000.0
    local_theta = local.get("rope_theta", 10000.0 if architecture == "gemma3" else None)
    return ModelConfig(
        architecture=architecture,
        vocab_size=int(raw["vocab_size"]),
        hidden_size=hidden,
        intermediate_size=int(raw["intermediate_size"]),
        num_layers=layers,
        num_heads=heads,
        num_kv_heads=int(raw.get("num_key_value_heads") or heads),
        head_dim=int(raw.get("head_dim") or hidden // heads),
        rms_norm_eps=float(raw.get("rms_norm_eps", 1e-6)),
        rope_theta=float(full.get("rope_theta", default_theta)),
        max_position_embeddings=max_positions,
        tie_word_embeddings=bool(
            raw.get("tie_word_embeddings", architecture in _TIED_BY_DEFAULT)
        ),
        bos_token_id=raw.get("bos_token_id"),
        eos_token_ids=tuple(token_ids(raw.get("eos_token_id"))),
        attention_bias=bool(raw.get("attention_bias", False)),
        rope_scaling=_rope_scaling(full),
        partial_rotary_factor=float(full.get("partial_rotary_factor") or 1.0),
        sliding_window=None if window is None else int(window),
        layer_types=layer_types,
        rope_local_theta=None if local_theta is None else float(local_theta),
        **_FAMILY_FIELDS[architecture](raw),
    )
