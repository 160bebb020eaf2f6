"""A Llama model's decoder layers in one call of the fused CPU ops.

Where every linear of a layer is a `GroupLinear` (the GGUF file's own groups on the fused
quantized op) and the model's layers are Llama's plain ones (`CausalLM.fusable`), `decoder_layers`
(kernels/cpu/decoder_layers.cpp) runs the whole stack: the very calls the modules make,
in their order, so the same bits (tests/workers/model/test_fused_layers.py), without the Python
and the dispatch of about ten op calls a layer. At one decode row those cost as much as
the attention does. Its weights are built once, named as the modules name them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

import torch
from torch import nn

from kernels import cpu_ops
from workers.model.attention import AttentionMetadata, KVCache
from workers.model.quantized_linear import GroupLinear

if TYPE_CHECKING:
    from workers.model.llama import CausalLM, DecoderLayer


class FusedLayers:
    """The model's layers as the op holds them; build it with `of`."""

    def __init__(self, stack: torch.ScriptObject) -> None:
        self.stack = stack

    @classmethod
    def of(cls, model: CausalLM) -> FusedLayers | None:
        """The fused layers of `model`, or None where the op does not cover it."""
        config = model.config
        if not model.fusable() or not cpu_ops.available():
            return None
        if model.embed_tokens.weight.dtype != torch.float32:
            return None
        layers: list[cpu_ops.LayerWeights] = []
        for module in model.layers:
            layer = cast("DecoderLayer", module)
            attention, mlp = layer.self_attn, layer.mlp
            linears = (attention.qkv_proj, attention.o_proj, mlp.gate_up_proj, mlp.down_proj)
            weights = [_quantized_weight(linear) for linear in linears]
            if any(weight is None for weight in weights):
                return None
            qkv_proj, o_proj, gate_up_proj, down_proj = cast(list[torch.ScriptObject], weights)
            layers.append(cpu_ops.LayerWeights(
                input_layernorm=layer.input_layernorm.weight,
                qkv_proj=qkv_proj,
                o_proj=o_proj,
                post_attention_layernorm=layer.post_attention_layernorm.weight,
                gate_up_proj=gate_up_proj,
                down_proj=down_proj,
            ))
        stack = cpu_ops.decoder_stack(
            layers,
            num_heads=config.num_heads,
            num_kv_heads=config.num_kv_heads,
            head_dim=config.head_dim,
            eps=config.rms_norm_eps,
            scale=config.head_dim**-0.5,
        )
        return cls(stack)

    def __call__(
        self,
        hidden: torch.Tensor,
        positions: torch.Tensor,
        attn: AttentionMetadata,
        kv_caches: list[KVCache],
        cos_sin_cache: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(hidden, residual) after the last layer, before the final norm."""
        return cpu_ops.decoder_layers(
            self.stack,
            hidden,
            positions,
            attn.slot_mapping,
            attn.block_tables,
            attn.context_lens,
            attn.cu_seqlens_q if attn.is_prefill else None,
            cos_sin_cache,
            [k_cache for k_cache, _ in kv_caches],
            [v_cache for _, v_cache in kv_caches],
        )


def _quantized_weight(linear: nn.Module) -> torch.ScriptObject | None:
    """A bias-free `GroupLinear`'s weight as the op holds it; None for any other linear."""
    if not isinstance(linear, GroupLinear) or isinstance(linear.bias, torch.Tensor):
        return None
    return linear.op_weight()
