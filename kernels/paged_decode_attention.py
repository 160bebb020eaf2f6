"""Decode attention (one query per sequence) over the paged KV cache: kernel, launcher, reference.
Long contexts are split across programs (flash-decoding) and merged by a second kernel."""

from __future__ import annotations

import torch

from kernels._launch import (
    FLOAT_DTYPES,
    check_launchable,
    check_paged_cache,
    check_shape,
    check_tensor,
    dot_precision,
    tl,
    triton,
    upcast_dot_inputs,
)
from kernels.context_splits import merge_context_splits, plan_context_splits
from kernels.dense_attention import (
    DenseLayout,
    attend_dense,
    check_sliding_window,
    gather_dense_kv,
)
from kernels.paged_tiles import paged_token_offsets
from kernels.step_memo import per_step

LOG2_E = 1.4426950408889634


@triton.jit
def _paged_decode_attention_kernel(
    q_ptr,
    k_cache_ptr,
    v_cache_ptr,
    block_tables_ptr,
    context_lens_ptr,
    out_ptr,
    partial_out_ptr,
    partial_lse_ptr,
    scale_log2,
    sliding_window,
    q_seq_stride,
    q_head_stride,
    out_seq_stride,
    out_head_stride,
    cache_block_stride,
    cache_token_stride,
    cache_head_stride,
    block_table_stride,
    block_size,
    head_dim,
    num_q_heads,
    num_splits,
    tokens_per_split,
    QUERIES_PER_KV: tl.constexpr,
    BLOCK_GROUP: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_N: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
    UPCAST_DOT_INPUTS: tl.constexpr,
    SPLIT_KV: tl.constexpr,
    SLIDING_WINDOW: tl.constexpr,
):
    # One program per (sequence, KV head, context split) serves all query heads of that
    # group, so each key/value tile is read from memory once.
    seq = tl.program_id(0).to(tl.int64)
    kv_head = tl.program_id(1)
    split = tl.program_id(2)
    context_len = tl.load(context_lens_ptr + seq)
    if SLIDING_WINDOW:
        # The splits cover the window alone: keys before it are never read (their blocks
        # may be back in the pool), so a step costs the window, not the context.
        split_start = tl.maximum(context_len - sliding_window, 0) + split * tokens_per_split
    else:
        split_start = split * tokens_per_split
    split_end = tl.minimum(context_len, split_start + tokens_per_split)
    group = tl.arange(0, BLOCK_GROUP)
    dims = tl.arange(0, BLOCK_D)
    q_heads = kv_head * QUERIES_PER_KV + group
    q_mask = (group[:, None] < QUERIES_PER_KV) & (dims[None, :] < head_dim)
    q = tl.load(
        q_ptr + seq * q_seq_stride + q_heads[:, None] * q_head_stride + dims[None, :],
        mask=q_mask,
        other=0.0,
    )
    if UPCAST_DOT_INPUTS:
        q = q.to(tl.float32)

    running_max = tl.full([BLOCK_GROUP], float("-inf"), dtype=tl.float32)
    running_sum = tl.zeros([BLOCK_GROUP], dtype=tl.float32)
    acc = tl.zeros([BLOCK_GROUP, BLOCK_D], dtype=tl.float32)
    for tile_start in range(split_start, split_end, BLOCK_N):
        tokens = tile_start + tl.arange(0, BLOCK_N)
        in_context = tokens < split_end
        token_offsets = paged_token_offsets(
            block_tables_ptr, seq, block_table_stride, tokens, in_context, block_size,
            cache_block_stride, cache_token_stride, kv_head, cache_head_stride,
        )
        kv_mask = in_context[:, None] & (dims[None, :] < head_dim)
        kv_offsets = token_offsets[:, None] + dims[None, :]
        k = tl.load(k_cache_ptr + kv_offsets, mask=kv_mask, other=0.0)
        if UPCAST_DOT_INPUTS:
            k = k.to(tl.float32)
        scores = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION) * scale_log2
        scores = tl.where(in_context[None, :], scores, float("-inf"))
        new_max = tl.maximum(running_max, tl.max(scores, axis=1))
        probs = tl.exp2(scores - new_max[:, None])
        rescale = tl.exp2(running_max - new_max)
        running_sum = running_sum * rescale + tl.sum(probs, axis=1)
        v = tl.load(v_cache_ptr + kv_offsets, mask=kv_mask, other=0.0)
        if UPCAST_DOT_INPUTS:
            v = v.to(tl.float32)
        # Probabilities are rounded to the cache dtype, as the tensor-core path needs.
        probs = probs.to(v_cache_ptr.dtype.element_ty).to(v.dtype)
        acc = acc * rescale[:, None] + tl.dot(probs, v, input_precision=DOT_PRECISION)
        running_max = new_max
    # An empty split (or a sequence with no context) gets zeros rather than 0/0.
    acc = acc / tl.where(running_sum > 0, running_sum, 1.0)[:, None]
    if SPLIT_KV:
        # Keep this split's log2-sum-exp so the merge can weigh the splits; -inf if empty.
        has_context = running_sum > 0
        log_sum = tl.log2(tl.where(has_context, running_sum, 1.0))
        lse = tl.where(has_context, running_max + log_sum, float("-inf"))
        partial_rows = (seq * num_q_heads + q_heads) * num_splits + split
        tl.store(partial_lse_ptr + partial_rows, lse, mask=group < QUERIES_PER_KV)
        tl.store(
            partial_out_ptr + partial_rows[:, None] * head_dim + dims[None, :], acc, mask=q_mask
        )
    else:
        tl.store(
            out_ptr + seq * out_seq_stride + q_heads[:, None] * out_head_stride + dims[None, :],
            acc.to(out_ptr.dtype.element_ty),
            mask=q_mask,
        )


def paged_decode_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    context_lens: torch.Tensor,
    scale: float,
    sliding_window: int | None = None,
) -> torch.Tensor:
    """q[B, Hq, D] attends to the first context_lens[b] cached tokens of its sequence, or
    with a sliding window W to the last W of them (positions p - W < k <= p for the query
    at p = context_lens[b] - 1); table entries before the window are never read.

    context_lens[b] must not exceed the table's capacity, block_tables.shape[1] * block_size
    (not checked on the host: that would sync with the GPU).
    """
    check_tensor("q", q, ndim=3, dtypes=FLOAT_DTYPES)
    check_sliding_window(sliding_window)
    batch, num_q_heads, head_dim = q.shape
    block_size, num_kv_heads = check_paged_cache(q, k_cache, v_cache, block_tables)
    if block_tables.shape[0] != batch:
        raise ValueError(f"block_tables must have {batch} rows, got {block_tables.shape[0]}")
    check_tensor(
        "context_lens", context_lens, ndim=1, dtypes=(torch.int32,), inner_contiguous=False
    )
    check_shape("context_lens", context_lens, (batch,))
    check_launchable(
        q=q, k_cache=k_cache, v_cache=v_cache, block_tables=block_tables, context_lens=context_lens
    )
    out = torch.empty((batch, num_q_heads, head_dim), dtype=q.dtype, device=q.device)
    if batch == 0:
        return out
    queries_per_kv = num_q_heads // num_kv_heads
    capacity = block_tables.shape[1] * block_size
    # The most keys a row attends to: what the context splits divide among them.
    span = capacity if sliding_window is None else min(capacity, sliding_window)
    block_d = max(16, triton.next_power_of_2(head_dim))
    tokens_per_tile = decode_tokens_per_tile(q.dtype, block_d)
    splits, tokens_per_split = plan_context_splits(
        batch, num_kv_heads, span, tokens_per_tile, q.device
    )
    # Partial results stay fp32 until merged; with one split the kernel writes out directly
    # and never touches the partial buffers, so out stands in for them.
    partial_out = (
        torch.empty((batch, num_q_heads, splits, head_dim), device=q.device) if splits > 1 else out
    )
    partial_lse = torch.empty((batch, num_q_heads, splits), device=q.device) if splits > 1 else out
    _paged_decode_attention_kernel[(batch, num_kv_heads, splits)](
        q,
        k_cache,
        v_cache,
        block_tables,
        context_lens.contiguous(),
        out,
        partial_out,
        partial_lse,
        float(scale) * LOG2_E,
        sliding_window or 0,
        q.stride(0),
        q.stride(1),
        out.stride(0),
        out.stride(1),
        k_cache.stride(0),
        k_cache.stride(1),
        k_cache.stride(2),
        block_tables.stride(0),
        block_size,
        head_dim,
        num_q_heads,
        splits,
        tokens_per_split,
        QUERIES_PER_KV=queries_per_kv,
        BLOCK_GROUP=max(16, triton.next_power_of_2(queries_per_kv)),  # tl.dot needs >= 16 rows
        BLOCK_D=block_d,
        BLOCK_N=tokens_per_tile,
        DOT_PRECISION=dot_precision(q.dtype),
        UPCAST_DOT_INPUTS=upcast_dot_inputs(q.dtype),
        SPLIT_KV=splits > 1,
        SLIDING_WINDOW=sliding_window is not None,
        num_warps=4,
    )
    if splits > 1:
        merge_context_splits(partial_out, partial_lse, out)
    return out


def decode_tokens_per_tile(dtype: torch.dtype, block_d: int) -> int:
    """Cached tokens per inner-loop tile, gathered one by one through the block table (so
    independent of the cache block size). 64, except for fp32 past D=64: there the K and V
    tiles multiply in exact fp32 on the ordinary cores and take far more registers, and 64
    tokens spilled on sm_80, 32 on sm_90 (scripts/kernel_resources.py checks each tile)."""
    if dtype == torch.float32 and block_d > 64:
        return 16
    return 64


def paged_decode_attention_ref(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    context_lens: torch.Tensor,
    scale: float,
    sliding_window: int | None = None,
) -> torch.Tensor:
    """Plain-torch decode attention, batched; the CPU path's decode attention.

    Every sequence's blocks (those its window reaches, with a sliding window) are gathered
    whole (one row copy per block) into a padded [B, Hk, L, D] tensor; each kv head's
    query group then attends with two batched matmuls, positions outside a sequence's
    context or window masked out. Math in fp32. The gather indices and the mask depend on
    the step's metadata alone, so every layer of a step with the same window shares one
    copy (`per_step`).
    """
    check_sliding_window(sliding_window)
    if q.shape[0] == 0:
        return torch.zeros_like(q)
    block_size = k_cache.shape[1]
    layout = per_step(
        # Named by window, so a model alternating windowed and full layers keeps both.
        f"paged_decode_attention_ref/{sliding_window}",
        (block_tables, context_lens),
        block_size,
        lambda: DenseLayout.of(
            block_tables, context_lens, block_size, sliding_window=sliding_window
        ),
    )
    if layout.length == 0:
        return torch.zeros_like(q)
    keys, values = gather_dense_kv(k_cache, v_cache, layout)
    return attend_dense(q, keys, values, layout.mask, scale)
