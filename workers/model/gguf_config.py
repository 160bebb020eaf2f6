"""read_gguf_config: a GGUF file's metadata to a ModelConfig, per family, and the Hugging
Face name of each of its tensors. The keys are those llama.cpp's converter writes
(gguf-py's `Keys`); where it writes none, the value llama.cpp itself assumes is used
(Gemma 3's local rope base and layer pattern, SmolLM3's rope-less layers)."""

from __future__ import annotations

from typing import Any

import gguf

from workers.model.config import FULL, SLIDING, ModelConfig
from workers.model.families import GGUF_ARCHITECTURES
from workers.model.gguf_metadata import GgufHeader

# Per-layer GGUF tensor name -> Hugging Face name inside `model.layers.N.`.
_LAYER_NAMES = {
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_qkv": "self_attn.qkv_proj",
    "attn_output": "self_attn.o_proj",
    "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
    # A mixture-of-experts layer: the router, and every expert's projection in one 3-D tensor.
    "ffn_gate_inp": "mlp.gate",
    "ffn_gate_exps": "mlp.experts.gate_proj",
    "ffn_up_exps": "mlp.experts.up_proj",
    "ffn_down_exps": "mlp.experts.down_proj",
}
# Where a family's layer names mean something else.
_FAMILY_LAYER_NAMES = {
    # Phi-3's ffn_up holds gate and up, fused.
    "phi3": {"ffn_up": "mlp.gate_up_proj"},
    # Gemma 3 normalizes before and after each sublayer.
    "gemma3": {
        "post_attention_norm": "post_attention_layernorm",
        "ffn_norm": "pre_feedforward_layernorm",
        "post_ffw_norm": "post_feedforward_layernorm",
    },
}
_GLOBAL_NAMES = {
    "token_embd": "model.embed_tokens",
    "output_norm": "model.norm",
    "output": "lm_head",
}
# Tensors that are metadata for the rope table, not weights.
ROPE_TENSORS = ("rope_freqs.weight", "rope_factors_long.weight", "rope_factors_short.weight")
# llama.cpp's converter interleaves q/k rows for the families it converts as Llama.
PERMUTED_ARCHITECTURES = ("llama", "granite", "smollm3")


def field(reader: gguf.GGUFReader, key: str, default: Any = None) -> Any:
    found = reader.fields.get(key)
    return default if found is None else found.contents()


def hf_name(name: str, architecture: str) -> str:
    stem, _, suffix = name.rpartition(".")
    if stem in _GLOBAL_NAMES:
        return f"{_GLOBAL_NAMES[stem]}.{suffix}"
    parts = stem.split(".")
    names = {**_LAYER_NAMES, **_FAMILY_LAYER_NAMES.get(architecture, {})}
    if len(parts) == 3 and parts[0] == "blk" and parts[2] in names:
        return f"model.layers.{parts[1]}.{names[parts[2]]}.{suffix}"
    raise ValueError(f"GGUF tensor {name!r} is not one this loader knows")


def _rope_scaling(header: GgufHeader, arch: str) -> dict[str, Any] | None:
    freqs = header.floats("rope_freqs.weight")
    if freqs is not None:
        # Llama 3 scaling as llama.cpp stores it: the factors each frequency is divided by.
        return {"rope_type": "frequency_factors", "factors": freqs}
    kind = header.get(f"{arch}.rope.scaling.type")
    original = header.get(f"{arch}.rope.scaling.original_context_length")
    long, short = (header.floats(f"rope_factors_{which}.weight") for which in ("long", "short"))
    if long is not None and short is not None:
        # Phi-3's converter writes the factors as tensors and no scaling type; llama.cpp
        # applies them wherever they are, and so does this.
        longrope: dict[str, Any] = {
            "rope_type": "longrope", "long_factor": long, "short_factor": short,
            "original_max_position_embeddings": int(original),
        }
        attention_factor = header.get(f"{arch}.rope.scaling.attn_factor")
        if attention_factor is not None:
            longrope["attention_factor"] = float(attention_factor)
        return longrope
    if kind in (None, "none", "longrope"):
        return None
    if kind == "linear":
        return {"rope_type": "linear", "factor": float(header.get(f"{arch}.rope.scaling.factor"))}
    if kind == "yarn":
        scaling: dict[str, Any] = {
            "rope_type": "yarn",
            "factor": float(header.get(f"{arch}.rope.scaling.factor")),
            "original_max_position_embeddings": int(original),
        }
        for key, name in (("beta_fast", "yarn_beta_fast"), ("beta_slow", "yarn_beta_slow"),
                          ("attention_factor", "yarn_attn_factor")):
            value = header.get(f"{arch}.rope.scaling.{name}")
            if value is not None:
                scaling[key] = float(value)
        return scaling
    raise ValueError(f"unsupported GGUF rope scaling type {kind!r}")


def _family_fields(header: GgufHeader, arch: str, layers: int, names: set[str],
                   hidden: int, heads: int, head_dim: int) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    window = header.get(f"{arch}.attention.sliding_window")
    if arch == "gemma3":
        # llama.cpp: five local layers to one global one unless the file says otherwise,
        # local rope base 10000, and the score scale of gemma_pytorch (27B: hidden / heads).
        pattern = int(header.get(f"{arch}.attention.sliding_window_pattern", 6))
        if window:
            fields["layer_types"] = tuple(
                SLIDING if (i + 1) % pattern else FULL for i in range(layers)
            )
            fields["rope_local_theta"] = float(header.get(f"{arch}.rope.freq_base_swa", 10000.0))
        scalar = hidden // heads if layers == 62 else head_dim
        fields["attention_scale"] = float(scalar) ** -0.5
        fields["final_logit_softcapping"] = header.get(f"{arch}.final_logit_softcapping")
    elif arch == "phi3" and window:
        fields["layer_types"] = (SLIDING,) * layers
    if fields.get("layer_types") and window:
        fields["sliding_window"] = int(window)
    if arch == "smollm3":
        fields["rope_layers"] = tuple((i + 1) % 4 != 0 for i in range(layers))
    if arch == "qwen3moe":
        fields.update(_experts(header, arch, layers, names))
    if arch == "granite":
        fields["attention_scale"] = float(header.get(f"{arch}.attention.scale", head_dim**-0.5))
        fields["embedding_multiplier"] = float(header.get(f"{arch}.embedding_scale", 1.0))
        fields["residual_multiplier"] = float(header.get(f"{arch}.residual_scale", 1.0))
        fields["logits_scaling"] = float(header.get(f"{arch}.logit_scale", 1.0))
    # Bias on q/k/v alone (Qwen2) or on the output projection as well (some Llamas).
    output_bias = "blk.0.attn_output.bias" in names
    fields["attention_bias"] = output_bias
    fields["qkv_bias"] = not output_bias and (
        "blk.0.attn_q.bias" in names or "blk.0.attn_qkv.bias" in names
    )
    return fields


def _experts(header: GgufHeader, arch: str, layers: int, names: set[str]) -> dict[str, Any]:
    """llama.cpp renormalizes the chosen experts' weights of every qwen3moe file; a layer
    is sparse where the file holds its router."""
    return {
        "num_experts": int(_required(header, f"{arch}.expert_count")),
        "num_experts_per_tok": int(_required(header, f"{arch}.expert_used_count")),
        "moe_intermediate_size": int(_required(header, f"{arch}.expert_feed_forward_length")),
        "norm_topk_prob": True,
        "moe_layers": tuple(f"blk.{i}.ffn_gate_inp.weight" in names for i in range(layers)),
    }


def _required(header: GgufHeader, key: str) -> Any:
    value = header.get(key)
    if value is None:
        raise ValueError(f"{header.path.name} lacks the GGUF key {key}")
    return value


def read_gguf_config(header: GgufHeader) -> ModelConfig:
    arch = header.get("general.architecture")
    family = GGUF_ARCHITECTURES.get(arch)
    if family is None:
        raise ValueError(
            f"unsupported GGUF architecture {arch!r}; supported: {sorted(GGUF_ARCHITECTURES)}"
        )
    tensors = header.tensors
    if "token_embd.weight" not in tensors:
        raise ValueError(f"{header.path.name} has no token_embd.weight tensor")
    hidden = int(_required(header, f"{arch}.embedding_length"))
    heads = int(_required(header, f"{arch}.attention.head_count"))
    head_dim = int(header.get(f"{arch}.attention.key_length", hidden // heads))
    layers = int(_required(header, f"{arch}.block_count"))
    context = int(_required(header, f"{arch}.context_length"))
    rotary = int(header.get(f"{arch}.rope.dimension_count", head_dim))
    eos = header.get("tokenizer.ggml.eos_token_id")
    fields = _family_fields(header, arch, layers, set(tensors), hidden, heads, head_dim)
    if fields.get("sliding_window", 0) >= context:
        fields.pop("sliding_window")  # a window as wide as the context hides nothing
    return ModelConfig(
        architecture=family,
        # The embedding's rows, which the converter may trim to the real vocabulary.
        vocab_size=int(tensors["token_embd.weight"].shape[1]),
        hidden_size=hidden,
        intermediate_size=int(_required(header, f"{arch}.feed_forward_length")),
        num_layers=layers,
        num_heads=heads,
        num_kv_heads=int(header.get(f"{arch}.attention.head_count_kv", heads)),
        head_dim=head_dim,
        rms_norm_eps=float(_required(header, f"{arch}.attention.layer_norm_rms_epsilon")),
        rope_theta=float(header.get(f"{arch}.rope.freq_base", 10000.0)),
        max_position_embeddings=context,
        tie_word_embeddings="output.weight" not in tensors,
        bos_token_id=header.get("tokenizer.ggml.bos_token_id"),
        eos_token_ids=() if eos is None else (int(eos),),
        rope_scaling=_rope_scaling(header, arch),
        partial_rotary_factor=rotary / head_dim,
        **fields,
    )
