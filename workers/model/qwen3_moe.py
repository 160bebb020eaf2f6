"""Qwen3 mixture of experts: Qwen3's attention (q/k norms) with a sparse MLP on the layers
config.is_moe names. A router linear scores every expert; each token goes to its top k by
softmax (their weights renormalized to sum to 1 where config.norm_topk_prob), and the
chosen experts' SwiGLU MLPs run grouped by expert in one op (kernels/moe_experts.py), over
all experts' weights stacked as gate_up [E, 2I, H] and down [E, H, I]."""

from __future__ import annotations

import torch
from torch import nn

from kernels import KernelOps
from workers.model.config import ModelConfig
from workers.model.llama import CausalLM, DecoderLayer


class Experts(nn.Module):
    """All experts' weights, stacked; the loader fills them expert by expert."""

    def __init__(self, config: ModelConfig, dtype: torch.dtype | None):
        super().__init__()
        experts, hidden, width = (
            config.num_experts, config.hidden_size, config.moe_intermediate_size
        )
        self.gate_up_proj = nn.Parameter(torch.empty(experts, 2 * width, hidden, dtype=dtype))
        self.down_proj = nn.Parameter(torch.empty(experts, hidden, width, dtype=dtype))


class SparseMoeBlock(nn.Module):
    def __init__(self, config: ModelConfig, ops: KernelOps, dtype: torch.dtype | None):
        super().__init__()
        self.ops = ops
        self.top_k = config.num_experts_per_tok
        self.norm_topk_prob = config.norm_topk_prob
        self.gate = nn.Linear(config.hidden_size, config.num_experts, bias=False, dtype=dtype)
        self.experts = Experts(config, dtype)

    def route(self, hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(expert ids [T, K], their weights [T, K] in hidden's dtype), as transformers
        routes: softmax in float32 over all experts, then the top k."""
        probabilities = torch.softmax(self.gate(hidden).float(), dim=-1)
        weights, expert_ids = torch.topk(probabilities, self.top_k, dim=-1)
        if self.norm_topk_prob:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        return expert_ids, weights.to(hidden.dtype)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        expert_ids, weights = self.route(hidden)
        experts = self.experts
        out: torch.Tensor = self.ops.moe_experts(
            hidden, experts.gate_up_proj, experts.down_proj, expert_ids, weights
        )
        return out


class Qwen3MoeDecoderLayer(DecoderLayer):
    def __init__(
        self, config: ModelConfig, ops: KernelOps, dtype: torch.dtype | None, layer: int = 0
    ):
        super().__init__(config, ops, dtype, layer)
        if config.is_moe(layer):
            self.mlp = SparseMoeBlock(config, ops, dtype)  # type: ignore[assignment]


class Qwen3MoeForCausalLM(CausalLM):
    layer_class = Qwen3MoeDecoderLayer
