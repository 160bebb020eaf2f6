"""Causal prefill attention for packed ragged sequences, keys and values read from the paged
KV cache (cached prefix plus the new tokens): kernel, launcher, reference."""

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
from kernels.dense_attention import (
    ContextMask,
    DenseLayout,
    attend_dense,
    check_sliding_window,
    gather_dense_kv,
)
from kernels.paged_tiles import paged_token_offsets

LOG2_E = 1.4426950408889634
# What the reference gathers for one batch of queries at most (see prefill_attention_ref).
PREFILL_GATHER_BYTES = 64 * 1024 * 1024


@triton.jit
def _prefill_attention_kernel(
    q_ptr,
    k_cache_ptr,
    v_cache_ptr,
    block_tables_ptr,
    cu_seqlens_q_ptr,
    context_lens_ptr,
    out_ptr,
    scale_log2,
    sliding_window,
    q_token_stride,
    q_head_stride,
    out_token_stride,
    out_head_stride,
    cache_block_stride,
    cache_token_stride,
    cache_head_stride,
    block_table_stride,
    block_size,
    head_dim,
    QUERIES_PER_KV: tl.constexpr,
    QUERIES_PER_TILE: tl.constexpr,
    BLOCK_ROWS: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_N: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
    UPCAST_DOT_INPUTS: tl.constexpr,
    SLIDING_WINDOW: tl.constexpr,
):
    # The grid covers the longest possible sequence (all T tokens) so the host never reads
    # lengths back from the GPU; tiles past a sequence's end leave at once.
    tile = tl.program_id(0)
    seq = tl.program_id(1).to(tl.int64)
    kv_head = tl.program_id(2)
    q_start = tl.load(cu_seqlens_q_ptr + seq)
    q_len = tl.load(cu_seqlens_q_ptr + seq + 1) - q_start
    first_query = tile * QUERIES_PER_TILE
    if first_query >= q_len:
        return
    context_len = tl.load(context_lens_ptr + seq)
    prefix_len = context_len - q_len

    # Each row is one (query, head) pair of this KV head's group: K/V tiles are loaded once
    # for all grouped query heads.
    rows = tl.arange(0, BLOCK_ROWS)
    query = first_query + rows // QUERIES_PER_KV
    head = kv_head * QUERIES_PER_KV + rows % QUERIES_PER_KV
    row_valid = (rows < QUERIES_PER_TILE * QUERIES_PER_KV) & (query < q_len)
    query_position = prefix_len + query
    dims = tl.arange(0, BLOCK_D)
    token_rows = (q_start + query).to(tl.int64)
    q_offsets = token_rows[:, None] * q_token_stride + head[:, None] * q_head_stride
    q_mask = row_valid[:, None] & (dims[None, :] < head_dim)
    q = tl.load(q_ptr + q_offsets + dims[None, :], mask=q_mask, other=0.0)
    if UPCAST_DOT_INPUTS:
        q = q.to(tl.float32)

    running_max = tl.full([BLOCK_ROWS], float("-inf"), dtype=tl.float32)
    running_sum = tl.zeros([BLOCK_ROWS], dtype=tl.float32)
    acc = tl.zeros([BLOCK_ROWS, BLOCK_D], dtype=tl.float32)
    # Causality bounds the keys this tile can see by its last query's position.
    last_query = tl.minimum(first_query + QUERIES_PER_TILE, q_len) - 1
    keys_visible = prefix_len + last_query + 1
    if SLIDING_WINDOW:
        # ... and the window by its first query's: keys before it are never read.
        first_key = tl.maximum(prefix_len + first_query - sliding_window + 1, 0)
    else:
        first_key = 0
    for tile_start in range(first_key, keys_visible, BLOCK_N):
        tokens = tile_start + tl.arange(0, BLOCK_N)
        in_context = tokens < keys_visible
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
        visible = in_context[None, :] & (tokens[None, :] <= query_position[:, None])
        if SLIDING_WINDOW:
            visible = visible & (tokens[None, :] > query_position[:, None] - sliding_window)
        scores = tl.where(visible, scores, float("-inf"))
        new_max = tl.maximum(running_max, tl.max(scores, axis=1))
        # Padding rows can see nothing; keep their max finite so exp2 stays NaN-free.
        new_max = tl.where(new_max == float("-inf"), 0.0, new_max)
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
    acc = acc / tl.where(running_sum > 0, running_sum, 1.0)[:, None]
    out_offsets = token_rows[:, None] * out_token_stride + head[:, None] * out_head_stride
    tl.store(out_ptr + out_offsets + dims[None, :], acc.to(out_ptr.dtype.element_ty), mask=q_mask)


def prefill_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    context_lens: torch.Tensor,
    scale: float,
    sliding_window: int | None = None,
) -> torch.Tensor:
    """Causal attention for q[T, Hq, D] packed by cu_seqlens_q; sequence b's new queries sit
    at positions context_lens[b] - q_len .. context_lens[b] - 1 of its cached keys. With a
    sliding window W the query at p sees keys p - W < k <= p; earlier ones are not read."""
    check_tensor("q", q, ndim=3, dtypes=FLOAT_DTYPES)
    check_sliding_window(sliding_window)
    num_tokens, num_q_heads, head_dim = q.shape
    block_size, num_kv_heads = check_paged_cache(q, k_cache, v_cache, block_tables)
    batch = block_tables.shape[0]
    check_tensor(
        "cu_seqlens_q", cu_seqlens_q, ndim=1, dtypes=(torch.int32,), inner_contiguous=False
    )
    check_shape("cu_seqlens_q", cu_seqlens_q, (batch + 1,))
    check_tensor(
        "context_lens", context_lens, ndim=1, dtypes=(torch.int32,), inner_contiguous=False
    )
    check_shape("context_lens", context_lens, (batch,))
    check_launchable(
        q=q,
        k_cache=k_cache,
        v_cache=v_cache,
        block_tables=block_tables,
        cu_seqlens_q=cu_seqlens_q,
        context_lens=context_lens,
    )
    out = torch.empty((num_tokens, num_q_heads, head_dim), dtype=q.dtype, device=q.device)
    if num_tokens == 0 or batch == 0:
        return out
    queries_per_kv = num_q_heads // num_kv_heads
    block_d = max(16, triton.next_power_of_2(head_dim))
    rows_per_tile, tokens_per_tile = prefill_tiles(q.dtype, block_d)
    block_rows = max(rows_per_tile, triton.next_power_of_2(queries_per_kv))
    queries_per_tile = block_rows // queries_per_kv
    grid = (triton.cdiv(num_tokens, queries_per_tile), batch, num_kv_heads)
    _prefill_attention_kernel[grid](
        q,
        k_cache,
        v_cache,
        block_tables,
        cu_seqlens_q.contiguous(),
        context_lens.contiguous(),
        out,
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
        QUERIES_PER_KV=queries_per_kv,
        QUERIES_PER_TILE=queries_per_tile,
        BLOCK_ROWS=block_rows,
        BLOCK_D=block_d,
        BLOCK_N=tokens_per_tile,
        DOT_PRECISION=dot_precision(q.dtype),
        UPCAST_DOT_INPUTS=upcast_dot_inputs(q.dtype),
        SLIDING_WINDOW=sliding_window is not None,
        num_warps=4,
    )
    return out


def prefill_tiles(dtype: torch.dtype, block_d: int) -> tuple[int, int]:
    """(query rows, cached tokens) per tile, sized so the kernel keeps its accumulator
    [rows, D], scores [rows, tokens] and K/V tile [tokens, D] in registers on sm_80 and
    sm_90 alike (scripts/kernel_resources.py checks every one for spills).

    Half-precision tiles multiply on tensor cores: 64 rows, and a token tile that shrinks as
    the head grows (64 at D=64; at D=128, 64 would spill on sm_80). fp32 multiplies in exact
    fp32 on the ordinary cores, where each thread holds far more of each operand: 64 x 64
    tiles spilled some 17 KB a thread there, so half the rows and half the tokens again.
    """
    if dtype == torch.float32:
        return 32, max(16, min(32, 2048 // block_d))
    return 64, max(16, min(64, 4096 // block_d))


def prefill_attention_ref(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    context_lens: torch.Tensor,
    scale: float,
    sliding_window: int | None = None,
) -> torch.Tensor:
    """Plain-torch prefill, the CPU path's: every new query attends exactly as a decode step
    at its position would (`paged_decode_attention_ref`'s math on the same dense fp32
    layout, its context ending at that query, its window too). A token's bits then do not
    depend on whether it was prefilled in one piece, after a cached prefix, or decoded one
    step at a time, which is what lets a replacement worker rebuild a dead worker's KV
    cache with the same bits (docs/reliability.md)."""
    check_sliding_window(sliding_window)
    out = torch.empty_like(q)
    block_size = k_cache.shape[1]
    num_kv_heads, head_dim = k_cache.shape[2], k_cache.shape[3]
    query_starts = cu_seqlens_q.tolist()
    for seq, context_len in enumerate(context_lens.tolist()):
        q_start, q_end = query_starts[seq], query_starts[seq + 1]
        q_len = q_end - q_start
        if q_len == 0:
            continue
        if context_len < q_len:
            raise ValueError(
                f"sequence {seq}: context length {context_len} is shorter than its "
                f"{q_len} new tokens"
            )
        positions = torch.arange(
            context_len - q_len, context_len, dtype=torch.int32, device=q.device
        )
        if sliding_window is not None:
            out[q_start:q_end] = _windowed_prefill(
                q[q_start:q_end], k_cache, v_cache, block_tables[seq], positions, scale,
                sliding_window,
            )
            continue
        # The sequence's keys and values are gathered once; each batch of queries gets
        # them copied out per query (decode's [B, Hk, L, D] layout), so bound that copy.
        layout = DenseLayout.of(
            block_tables[seq : seq + 1], context_lens[seq : seq + 1], block_size, context_len
        )
        keys, values = gather_dense_kv(k_cache, v_cache, layout)
        bytes_per_query = 8 * num_kv_heads * head_dim * keys.shape[2]
        queries_per_batch = max(1, PREFILL_GATHER_BYTES // bytes_per_query)
        for first in range(0, q_len, queries_per_batch):
            last = min(first + queries_per_batch, q_len)
            # Decode pads a row's context to whole blocks: the same length here.
            length = -(-int(positions[last - 1] + 1) // block_size) * block_size
            count = last - first
            out[q_start + first : q_start + last] = attend_dense(
                q[q_start + first : q_start + last],
                keys[:, :, :length].expand(count, -1, -1, -1).contiguous(),
                values[:, :, :length].expand(count, -1, -1, -1).contiguous(),
                ContextMask.of(positions[first:last] + 1, length),
                scale,
            )
    return out


def _windowed_prefill(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    table_row: torch.Tensor,
    positions: torch.Tensor,
    scale: float,
    sliding_window: int,
) -> torch.Tensor:
    """One sequence's queries q [Lq, Hq, D] at `positions`, a batch of them at a time as
    decode steps of the same sequence: each row gathers the blocks its own window reaches
    (decode's windowed layout), so a query's cost and copy are bounded by the window."""
    block_size, num_kv_heads, head_dim = k_cache.shape[1], k_cache.shape[2], k_cache.shape[3]
    # The most blocks a window of W keys can touch, and so the widest row.
    widest = (-(-(sliding_window - 1) // block_size) + 1) * block_size
    queries_per_batch = max(1, PREFILL_GATHER_BYTES // (8 * num_kv_heads * head_dim * widest))
    out = torch.empty_like(q)
    for first in range(0, q.shape[0], queries_per_batch):
        last = min(first + queries_per_batch, q.shape[0])
        contexts = positions[first:last] + 1
        layout = DenseLayout.of(
            table_row.expand(last - first, -1), contexts, block_size,
            sliding_window=sliding_window,
        )
        keys, values = gather_dense_kv(k_cache, v_cache, layout)
        out[first:last] = attend_dense(q[first:last], keys, values, layout.mask, scale)
    return out
