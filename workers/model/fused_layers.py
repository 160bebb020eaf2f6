"""A Llama model's decoder layers in one call of the fused CPU ops.

Where every linear of a layer is a `GroupLinear` (the GGUF file's own groups on the fused
quantized op) and the layers have neither biases nor q/k norms, `decoder_layers` in
kernels/cpu/ops.cpp runs the whole stack: the very calls the modules make, in their
order, so the same bits (tests/model/test_fused_layers.py), without the Python and the
dispatch of about ten op calls a layer. At one decode row those cost as much as the
attention does.
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

_NO_MINS = torch.empty(0)


class FusedLayers:
    """The layers' tensors flattened as the op reads them; build it with `of`."""

    def __init__(
        self, model: CausalLM, layers: list[tuple[torch.Tensor, torch.Tensor, list[GroupLinear]]]
    ) -> None:
        """`layers`: each layer's input norm weight, post-attention norm weight, and its
        qkv, o, gate_up and down linears."""
        config = model.config
        self.num_heads = config.num_heads
        self.num_kv_heads = config.num_kv_heads
        self.head_dim = config.head_dim
        self.eps = config.rms_norm_eps
        self.scale = config.head_dim**-0.5
        self.weights: list[torch.Tensor] = []
        self.quant: list[int] = []
        for input_norm, post_norm, (qkv, o, gate_up, down) in layers:
            self.weights.append(input_norm)
            self._add(qkv)
            self._add(o)
            self.weights.append(post_norm)
            self._add(gate_up)
            self._add(down)

    def _add(self, linear: GroupLinear) -> None:
        mins = linear.mins if isinstance(linear.mins, torch.Tensor) else _NO_MINS
        self.weights += [cast(torch.Tensor, linear.codes), cast(torch.Tensor, linear.scales), mins]
        self.quant += [linear.bits, linear.offset]

    @classmethod
    def of(cls, model: CausalLM) -> FusedLayers | None:
        """The fused layers of `model`, or None where the op does not cover it."""
        config = model.config
        if config.attention_bias or config.uses_qk_norm or not cpu_ops.available():
            return None
        if model.embed_tokens.weight.dtype != torch.float32:
            return None
        layers: list[tuple[torch.Tensor, torch.Tensor, list[GroupLinear]]] = []
        for module in model.layers:
            layer = cast("DecoderLayer", module)
            attention, mlp = layer.self_attn, layer.mlp
            four: list[nn.Module] = [
                attention.qkv_proj, attention.o_proj, mlp.gate_up_proj, mlp.down_proj
            ]
            linears: list[GroupLinear] = []
            for linear in four:
                if not isinstance(linear, GroupLinear) or isinstance(linear.bias, torch.Tensor):
                    return None
                linears.append(linear)
            layers.append((
                layer.input_layernorm.weight, layer.post_attention_layernorm.weight, linears
            ))
        return cls(model, layers)

    def __call__(
        self,
        hidden: torch.Tensor,
        positions: torch.Tensor,
        attn: AttentionMetadata,
        kv_caches: list[KVCache],
        cos_sin_cache: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(hidden, residual) after the last layer, before the final norm."""
        out: tuple[torch.Tensor, torch.Tensor] = torch.ops.spate_cpu.decoder_layers(
            hidden,
            positions,
            attn.slot_mapping,
            attn.block_tables,
            attn.context_lens,
            attn.cu_seqlens_q if attn.is_prefill else None,
            cos_sin_cache,
            [k_cache for k_cache, _ in kv_caches],
            [v_cache for _, v_cache in kv_caches],
            self.weights,
            self.quant,
            self.num_heads,
            self.num_kv_heads,
            self.head_dim,
            self.eps,
            self.scale,
        )
        return out
