"""Where a tile of tokens lives in the paged KV cache: shared by the attention kernels."""

from __future__ import annotations

from kernels._launch import tl, triton


@triton.jit
def paged_token_offsets(
    block_tables_ptr,
    seq,
    block_table_stride,
    tokens,
    in_context,
    block_size,
    cache_block_stride,
    cache_token_stride,
    kv_head,
    cache_head_stride,
):
    """Element offsets of `tokens` (positions in sequence `seq`) for one KV head, through
    the sequence's block table; tokens outside the context read block 0 (masked later)."""
    physical_block = tl.load(
        block_tables_ptr + seq * block_table_stride + tokens // block_size,
        mask=in_context,
        other=0,
    ).to(tl.int64)
    return (
        physical_block * cache_block_stride
        + (tokens % block_size) * cache_token_stride
        + kv_head * cache_head_stride
    )
