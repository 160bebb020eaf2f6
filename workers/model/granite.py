"""Granite: Llama's layers with four multipliers. The embeddings are scaled by
`embedding_multiplier`, each attention and MLP output by `residual_multiplier` before its
residual add, the attention scores by `attention_multiplier` (config.attention_scale,
in place of head_dim ** -0.5), and the logits divided by `logits_scaling`."""

from __future__ import annotations

import torch

from workers.model.attention import AttentionMetadata, KVCache
from workers.model.llama import CausalLM, DecoderLayer


class GraniteDecoderLayer(DecoderLayer):
    def forward(
        self,
        positions: torch.Tensor,
        hidden: torch.Tensor,
        residual: torch.Tensor | None,
        attn: AttentionMetadata,
        kv_cache: KVCache,
        cos_sin_cache: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        multiplier = self.self_attn.config.residual_multiplier
        hidden, residual = self.enter(hidden, residual)
        hidden = self.self_attn(positions, hidden, attn, kv_cache, cos_sin_cache) * multiplier
        hidden, residual = self.post_attention_layernorm(hidden, residual)
        return self.mlp(hidden) * multiplier, residual


class GraniteForCausalLM(CausalLM):
    layer_class = GraniteDecoderLayer

    def embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        embedded: torch.Tensor = self.embed_tokens(input_ids) * self.config.embedding_multiplier
        return embedded

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        logits: torch.Tensor = super().compute_logits(hidden) / self.config.logits_scaling
        return logits
