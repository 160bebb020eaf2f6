"""Phi-3 / Phi-4-mini: Llama's layers with q/k/v and gate/up stored fused (loaded as they
are: the shared layers fuse them too) and a partial rotary head.

Phi-4-mini rotates the first 3/4 of each head's dimensions (pairs i, i + rotary_dim / 2)
and passes the rest through. Its q and k rows are loaded in the order `rotary_first_rows`
gives, which puts those pairs where the kernels rotate a whole head (i, i + head_dim / 2),
the rope table holding cos 1 and sin 0 past them: q.k is unchanged by permuting q and k
alike, so the attention is Phi's, with no kernel of its own. Its `longrope` scaling lives
in the rope table (workers/model/rope.py).
"""

from __future__ import annotations

import functools

import torch

from workers.model.llama import CausalLM
from workers.model.rope import rotary_first_rows


class Phi3ForCausalLM(CausalLM):
    def checkpoint_rows(self, name: str) -> torch.Tensor | None:
        config = self.config
        if config.rotary_dim == config.head_dim or ".self_attn.qkv_proj." not in name:
            return None
        return self._qkv_rows

    @functools.cached_property
    def _qkv_rows(self) -> torch.Tensor:
        config = self.config
        q_rows = rotary_first_rows(config.num_heads, config.head_dim, config.rotary_dim)
        k_rows = rotary_first_rows(config.num_kv_heads, config.head_dim, config.rotary_dim)
        v_rows = torch.arange(config.kv_size)
        return torch.cat((q_rows, config.q_size + k_rows, config.q_size + config.kv_size + v_rows))
