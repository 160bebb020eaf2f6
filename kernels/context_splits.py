"""Flash-decoding support: planning how a long context is split across programs, and the
kernel that merges the per-split partial attention results by their log-sum-exp."""

from __future__ import annotations

from functools import lru_cache

import torch

from kernels._launch import tl, triton

MAX_SPLITS = 64


@lru_cache(maxsize=8)
def _busy_program_target(device: torch.device) -> int:
    """About two programs per streaming multiprocessor keeps a GPU's memory system busy."""
    if device.type == "cuda":
        return 2 * torch.cuda.get_device_properties(device).multi_processor_count
    return 64  # the interpreter: enough to exercise splitting, few enough to stay quick


def plan_context_splits(
    batch: int, num_kv_heads: int, context_capacity: int, tile: int, device: torch.device
) -> tuple[int, int]:
    """(splits, tokens per split, a multiple of tile) for up to context_capacity keys a
    row (the block table's capacity, or a sliding window where it is smaller).

    Planned from the block table's capacity rather than the actual lengths, which live on
    the GPU and would cost a sync to read. Splits past a sequence's end exit at once.
    """
    wanted = triton.cdiv(_busy_program_target(device), batch * num_kv_heads)
    possible = triton.cdiv(max(context_capacity, 1), tile)
    splits = max(1, min(wanted, possible, MAX_SPLITS))
    tokens_per_split = triton.cdiv(triton.cdiv(context_capacity, splits), tile)
    tokens_per_split = max(tokens_per_split, 1) * tile
    return triton.cdiv(max(context_capacity, 1), tokens_per_split), tokens_per_split


@triton.jit
def _merge_context_splits_kernel(
    partial_out_ptr,
    partial_lse_ptr,
    out_ptr,
    out_seq_stride,
    out_head_stride,
    num_q_heads,
    num_splits,
    head_dim,
    BLOCK_SPLITS: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    seq = tl.program_id(0).to(tl.int64)
    head = tl.program_id(1)
    splits = tl.arange(0, BLOCK_SPLITS)
    dims = tl.arange(0, BLOCK_D)
    rows = (seq * num_q_heads + head) * num_splits + splits
    lse = tl.load(partial_lse_ptr + rows, mask=splits < num_splits, other=float("-inf"))
    top = tl.max(lse, axis=0)
    weights = tl.exp2(lse - tl.where(top == float("-inf"), 0.0, top))
    parts_mask = (splits[:, None] < num_splits) & (dims[None, :] < head_dim)
    parts = tl.load(
        partial_out_ptr + rows[:, None] * head_dim + dims[None, :], mask=parts_mask, other=0.0
    )
    total = tl.sum(weights, axis=0)
    merged = tl.sum(weights[:, None] * parts, axis=0) / tl.where(total > 0, total, 1.0)
    tl.store(
        out_ptr + seq * out_seq_stride + head * out_head_stride + dims,
        merged.to(out_ptr.dtype.element_ty),
        mask=dims < head_dim,
    )


def merge_context_splits(
    partial_out: torch.Tensor, partial_lse: torch.Tensor, out: torch.Tensor
) -> None:
    """Combine partial_out[B, H, S, D] (each split normalized on its own) weighted by
    partial_lse[B, H, S] (log2-sum-exp, -inf for an empty split) into out[B, H, D]."""
    batch, num_heads, splits, head_dim = partial_out.shape
    _merge_context_splits_kernel[(batch, num_heads)](
        partial_out,
        partial_lse,
        out,
        out.stride(0),
        out.stride(1),
        num_heads,
        splits,
        head_dim,
        BLOCK_SPLITS=triton.next_power_of_2(splits),
        BLOCK_D=triton.next_power_of_2(head_dim),
        num_warps=2,
    )
