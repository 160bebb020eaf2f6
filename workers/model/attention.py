"""Paged attention for one layer: the per-step metadata, the KV cache layout and the layer itself."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from kernels import KernelOps
from kernels.dense_attention import check_sliding_window
from workers.model.config import ModelConfig

KVCache = tuple[torch.Tensor, torch.Tensor]


@dataclass(slots=True)
class AttentionMetadata:
    """What every layer needs to find a step's tokens in the paged cache.

    Tokens of all sequences in the step are packed one after another. In a decode step each
    sequence contributes exactly one token, so `T == B` and `cu_seqlens_q` may be None.
    """

    is_prefill: bool
    slot_mapping: torch.Tensor  # [T] int64, -1 for tokens whose k/v must not be stored
    block_tables: torch.Tensor  # [B, M] int32
    context_lens: torch.Tensor  # [B] int32, cached tokens after this step's are stored
    cu_seqlens_q: torch.Tensor | None = None  # [B + 1] int32, prefill only

    def __post_init__(self) -> None:
        if self.is_prefill and self.cu_seqlens_q is None:
            raise ValueError("a prefill step needs cu_seqlens_q")
        if self.block_tables.dim() != 2:
            raise ValueError(f"block_tables must be [B, M], got {tuple(self.block_tables.shape)}")
        batch = self.block_tables.shape[0]
        if self.context_lens.shape != (batch,):
            raise ValueError(
                f"context_lens must be [{batch}], got {tuple(self.context_lens.shape)}"
            )
        if self.cu_seqlens_q is not None and self.cu_seqlens_q.shape != (batch + 1,):
            raise ValueError(
                f"cu_seqlens_q must be [{batch + 1}], got {tuple(self.cu_seqlens_q.shape)}"
            )


def allocate_kv_cache(
    config: ModelConfig,
    num_blocks: int,
    block_size: int,
    device: torch.device | str,
    dtype: torch.dtype,
) -> list[KVCache]:
    """One (k_cache, v_cache) pair per layer, each [num_blocks, block_size, Hk, D], zeroed."""
    if num_blocks <= 0 or block_size <= 0:
        raise ValueError(
            f"num_blocks and block_size must be positive, got {num_blocks}, {block_size}"
        )
    shape = (num_blocks, block_size, config.num_kv_heads, config.head_dim)
    return [
        (
            torch.zeros(shape, device=device, dtype=dtype),
            torch.zeros(shape, device=device, dtype=dtype),
        )
        for _ in range(config.num_layers)
    ]


def kv_cache_bytes_per_block(config: ModelConfig, block_size: int, dtype: torch.dtype) -> int:
    """Bytes one block takes across all layers, k and v: what an engine sizes its pool by."""
    element = torch.empty((), dtype=dtype).element_size()
    per_layer = 2 * block_size * config.num_kv_heads * config.head_dim * element
    return per_layer * config.num_layers


class Attention(nn.Module):
    """Stores this step's k/v in the paged cache, then attends from the cache.

    Keys and values always go through the cache, so a prefill that continues a cached
    prefix and one that starts fresh take the same path. `scale` multiplies the scores
    (head_dim ** -0.5 when None); with `sliding_window` W the query at position p sees the
    keys at p - W < k <= p (W keys, itself included, as transformers counts), else every
    earlier key.
    """

    def __init__(
        self,
        num_heads: int,
        num_kv_heads: int,
        head_dim: int,
        ops: KernelOps,
        *,
        scale: float | None = None,
        sliding_window: int | None = None,
    ):
        super().__init__()
        check_sliding_window(sliding_window)
        self.num_heads = num_heads
        self.num_kv_heads = num_kv_heads
        self.head_dim = head_dim
        self.scale = head_dim**-0.5 if scale is None else float(scale)
        self.sliding_window = sliding_window
        self.ops = ops

    def forward(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        kv_cache: KVCache,
        attn: AttentionMetadata,
    ) -> torch.Tensor:
        """q [T, Hq, D], k/v [T, Hk, D] -> [T, Hq * D]."""
        k_cache, v_cache = kv_cache
        self.ops.store_kv_cache(k, v, k_cache, v_cache, attn.slot_mapping)
        if attn.is_prefill:
            out = self.ops.prefill_attention(
                q,
                k_cache,
                v_cache,
                attn.block_tables,
                attn.cu_seqlens_q,
                attn.context_lens,
                self.scale,
                sliding_window=self.sliding_window,
            )
        else:
            out = self.ops.paged_decode_attention(
                q,
                k_cache,
                v_cache,
                attn.block_tables,
                attn.context_lens,
                self.scale,
                sliding_window=self.sliding_window,
            )
        return out.reshape(q.shape[0], self.num_heads * self.head_dim)


def kv_release_window(model: nn.Module) -> int | None:
    """The window past which a sequence's cached keys are never read again, when every
    attention layer of `model` slides (the widest of their windows); None when any layer
    attends to the whole context (or the model has no attention layers). The engine's
    block manager frees blocks wholly before it."""
    windows = [module.sliding_window for module in model.modules() if isinstance(module, Attention)]
    if not windows or any(window is None for window in windows):
        return None
    return max(window for window in windows if window is not None)
