"""Gemma 3 (text): alternating local and global layers over Llama's attention.

What it changes: sliding-window layers (config.layer_types) rotate by their own rope base
(`rope_local_base_freq`, an unscaled table of their own) and the global ones by
`rope_theta` with its scaling; each attention and MLP output is normalized before its
residual add (four norms a layer); norms multiply by (1 + weight), which the loaders hand
over already added (llama.cpp's GGUF files store it so); the MLP is GELU (tanh) gated;
embeddings are scaled by sqrt(hidden_size); q/k are normalized per head and the scores
scaled by query_pre_attn_scalar ** -0.5 (config.attention_scale); logits may be soft-capped.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from kernels import KernelOps
from workers.model.attention import AttentionMetadata, KVCache
from workers.model.config import ModelConfig
from workers.model.llama import MLP, CausalLM, DecoderLayer, RMSNorm
from workers.model.rope import build_cos_sin_cache


class GeluMLP(MLP):
    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up_proj(hidden).chunk(2, dim=-1)
        out: torch.Tensor = self.down_proj(F.gelu(gate, approximate="tanh") * up)
        return out


class Gemma3DecoderLayer(DecoderLayer):
    def __init__(
        self, config: ModelConfig, ops: KernelOps, dtype: torch.dtype | None, layer: int = 0
    ):
        super().__init__(config, ops, dtype, layer)
        self.mlp = GeluMLP(config, ops, dtype)
        self.pre_feedforward_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps, ops, dtype)
        self.post_feedforward_layernorm = RMSNorm(
            config.hidden_size, config.rms_norm_eps, ops, dtype
        )

    def forward(
        self,
        positions: torch.Tensor,
        hidden: torch.Tensor,
        residual: torch.Tensor | None,
        attn: AttentionMetadata,
        kv_cache: KVCache,
        cos_sin_cache: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        hidden, residual = self.enter(hidden, residual)
        hidden = self.self_attn(positions, hidden, attn, kv_cache, cos_sin_cache)
        hidden = self.post_attention_layernorm(hidden)
        hidden, residual = self.pre_feedforward_layernorm(hidden, residual)
        return self.post_feedforward_layernorm(self.mlp(hidden)), residual


class Gemma3ForCausalLM(CausalLM):
    layer_class = Gemma3DecoderLayer

    def __init__(self, config: ModelConfig, ops: KernelOps, dtype: torch.dtype | None = None):
        super().__init__(config, ops, dtype)
        cache_dtype = dtype if dtype is not None else torch.get_default_dtype()
        self.register_buffer(
            "local_cos_sin_cache",
            build_cos_sin_cache(config, self.embed_tokens.weight.device, cache_dtype, local=True),
            persistent=False,
        )

    def embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        # As transformers: the scale rounded to the weights' dtype, then multiplied.
        weight = self.embed_tokens.weight
        scale = torch.tensor(self.config.hidden_size**0.5, dtype=weight.dtype)
        embedded: torch.Tensor = self.embed_tokens(input_ids) * scale.to(weight.device)
        return embedded

    def layer_rope(self, layer: int) -> torch.Tensor:
        if self.config.is_sliding(layer):
            local: torch.Tensor = self.local_cos_sin_cache
            return local
        return self.cos_sin_cache

    def build_rope_tables(self) -> None:
        super().build_rope_tables()
        weight = self.embed_tokens.weight
        self.local_cos_sin_cache = build_cos_sin_cache(
            self.config, weight.device, weight.dtype, local=True
        )

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        logits = super().compute_logits(hidden)
        cap = self.config.final_logit_softcapping
        return logits if cap is None else torch.tanh(logits / cap) * cap
