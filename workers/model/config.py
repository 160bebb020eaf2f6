"""ModelConfig: the architecture numbers the forward pass needs, whatever file they came from."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from workers.model.families import ARCHITECTURES

SLIDING = "sliding_attention"
FULL = "full_attention"


@dataclass(frozen=True, slots=True)
class ModelConfig:
    architecture: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    max_position_embeddings: int
    tie_word_embeddings: bool
    bos_token_id: int | None = None
    eos_token_ids: tuple[int, ...] = ()
    # Bias on q, k, v and o (Llama checkpoints that have one); `qkv_bias` on q, k, v only (Qwen2).
    attention_bias: bool = False
    qkv_bias: bool = False
    # Hugging Face style rope scaling dict (workers/model/rope.py lists the types); None
    # means plain rope. GGUF `rope_freqs` arrive as {"rope_type": "frequency_factors", ...}.
    rope_scaling: dict[str, Any] | None = field(default=None, hash=False)
    # The fraction of each head rope rotates (Phi-4-mini: 0.75); the rest passes through.
    partial_rotary_factor: float = 1.0
    # Keys a query sees on a "sliding_attention" layer, itself included; None: no window.
    sliding_window: int | None = None
    # Per layer, FULL or SLIDING (Hugging Face's `layer_types`); empty: all FULL.
    layer_types: tuple[str, ...] = ()
    # Rope base of the sliding layers where it differs from `rope_theta` (Gemma 3).
    rope_local_theta: float | None = None
    # Per layer, whether it applies rope (SmolLM3's `no_rope_layers`, 1 = rope); empty: all.
    rope_layers: tuple[bool, ...] = ()
    # The attention softmax scale; None: head_dim ** -0.5 (Granite's attention_multiplier,
    # Gemma 3's query_pre_attn_scalar ** -0.5).
    attention_scale: float | None = None
    # Granite: the embeddings are multiplied by the first, each sublayer's output by the
    # second before its residual add, and the logits divided by the third.
    embedding_multiplier: float = 1.0
    residual_multiplier: float = 1.0
    logits_scaling: float = 1.0
    # Gemma 3 (where set): logits = cap * tanh(logits / cap).
    final_logit_softcapping: float | None = None
    # Mixture of experts (qwen3_moe): experts per sparse layer, how many each token is
    # routed to, each expert's SwiGLU width, and whether the chosen experts' softmax
    # weights are renormalized to sum to 1. 0 experts: every layer is a dense MLP.
    num_experts: int = 0
    num_experts_per_tok: int = 0
    moe_intermediate_size: int = 0
    norm_topk_prob: bool = False
    # Per layer, whether its MLP is the sparse expert block; empty: all, where num_experts.
    moe_layers: tuple[bool, ...] = ()

    def __post_init__(self) -> None:
        if self.architecture not in ARCHITECTURES:
            raise ValueError(
                f"unsupported architecture {self.architecture!r}; supported: {ARCHITECTURES}"
            )
        for name in (
            "vocab_size",
            "hidden_size",
            "intermediate_size",
            "num_layers",
            "num_heads",
            "num_kv_heads",
            "head_dim",
            "max_position_embeddings",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if self.num_heads % self.num_kv_heads != 0:
            raise ValueError(
                f"num_heads ({self.num_heads}) must be a multiple of "
                f"num_kv_heads ({self.num_kv_heads})"
            )
        if self.head_dim % 2 != 0:
            raise ValueError(f"head_dim must be even for rotary embeddings, got {self.head_dim}")
        if self.rms_norm_eps <= 0 or self.rope_theta <= 0:
            raise ValueError("rms_norm_eps and rope_theta must be positive")
        for name in ("layer_types", "rope_layers", "moe_layers"):
            value = getattr(self, name)
            if value and len(value) != self.num_layers:
                raise ValueError(f"{name} must name all {self.num_layers} layers, got {len(value)}")
        if set(self.layer_types) - {FULL, SLIDING}:
            raise ValueError(f"layer_types must be {FULL!r} or {SLIDING!r}, got {self.layer_types}")
        if self.num_experts and not (
            0 < self.num_experts_per_tok <= self.num_experts and self.moe_intermediate_size > 0
        ):
            raise ValueError(
                f"{self.num_experts} experts need 1 to {self.num_experts} experts per token and "
                f"a positive moe_intermediate_size, got {self.num_experts_per_tok} and "
                f"{self.moe_intermediate_size}"
            )
        if self.sliding_window is not None and self.sliding_window <= 0:
            raise ValueError(f"sliding_window must be positive, got {self.sliding_window}")
        if not 0 < self.partial_rotary_factor <= 1 or self.rotary_dim % 2:
            raise ValueError(
                f"partial_rotary_factor {self.partial_rotary_factor} must rotate an even "
                f"number of a head's {self.head_dim} dimensions"
            )

    @property
    def q_size(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        return self.num_kv_heads * self.head_dim

    @property
    def uses_qk_norm(self) -> bool:
        """Qwen3 and Gemma 3 normalize each query and key head (RMSNorm over head_dim) before rope."""
        return self.architecture in ("qwen3", "qwen3_moe", "gemma3")

    @property
    def rotary_dim(self) -> int:
        return int(self.head_dim * self.partial_rotary_factor)

    def is_sliding(self, layer: int) -> bool:
        return bool(self.layer_types) and self.layer_types[layer] == SLIDING

    def layer_window(self, layer: int) -> int | None:
        """The sliding window of one layer, None where it attends to the whole context."""
        return self.sliding_window if self.is_sliding(layer) else None

    def is_moe(self, layer: int) -> bool:
        """Whether a layer's MLP is the sparse expert block rather than a dense one."""
        return self.num_experts > 0 and (not self.moe_layers or self.moe_layers[layer])

    def layer_uses_rope(self, layer: int) -> bool:
        return not self.rope_layers or self.rope_layers[layer]
