"""SmolLM3: Llama's layers, every fourth without rope (`no_rope_layers`, "NoPE"): those
attend by content alone, the others carry positions."""

from __future__ import annotations

import torch

from kernels import KernelOps
from workers.model.config import ModelConfig
from workers.model.llama import CausalLM, DecoderLayer, SelfAttention


class NoRopeAttention(SelfAttention):
    def __init__(
        self, config: ModelConfig, ops: KernelOps, dtype: torch.dtype | None, layer: int = 0
    ):
        super().__init__(config, ops, dtype, layer)
        self.uses_rope = config.layer_uses_rope(layer)

    def rotate(
        self, q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor, cos_sin_cache: torch.Tensor
    ) -> None:
        if self.uses_rope:
            super().rotate(q, k, positions, cos_sin_cache)


class SmolLM3DecoderLayer(DecoderLayer):
    attention_class = NoRopeAttention


class SmolLM3ForCausalLM(CausalLM):
    layer_class = SmolLM3DecoderLayer
