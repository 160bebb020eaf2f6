"""The torch references' attention math: a batch's cached blocks gathered into a dense
fp32 [B, Hk, L, D] layout (only the blocks a row's window reaches), a mask of what each
row may not see, and the two batched matmuls over them. Shared by decode and prefill, so a
prefilled query gets the layout, and so the bits, that a decode step at its position gets."""

from __future__ import annotations

from dataclasses import dataclass

import torch


def check_sliding_window(sliding_window: int | None) -> None:
    """A window is a positive number of keys (the query's own included), or None."""
    if sliding_window is None:
        return
    if isinstance(sliding_window, bool) or not isinstance(sliding_window, int):
        raise ValueError(f"sliding_window must be an int or None, got {sliding_window!r}")
    if sliding_window < 1:
        raise ValueError(f"sliding_window must be at least 1, got {sliding_window}")


def first_visible_positions(context_lens: torch.Tensor, sliding_window: int | None) -> torch.Tensor:
    """The first key a row whose last position is context_lens - 1 attends to: a query at
    position p sees keys p - W < k <= p (transformers' sliding window), all of them if None."""
    if sliding_window is None:
        return torch.zeros_like(context_lens)
    return (context_lens - sliding_window).clamp(min=0)


@dataclass(frozen=True, slots=True)
class ContextMask:
    """Which of a dense layout's L positions each row must not see."""

    hidden: torch.Tensor  # [B, 1, 1, L] bool: True outside the row's visible keys
    empty_rows: torch.Tensor | None  # [B, 1, 1] bool, rows with no context; None if none

    @staticmethod
    def of(
        context_lens: torch.Tensor,
        length: int,
        *,
        start: torch.Tensor | None = None,
        sliding_window: int | None = None,
    ) -> ContextMask:
        """Row b's dense position j holds key start[b] + j (j if start is None); it sees
        the keys before context_lens[b] that its window reaches."""
        positions = torch.arange(length, device=context_lens.device)[None, :]
        if start is not None:
            positions = positions + start[:, None]
        hidden = positions >= context_lens[:, None]
        if sliding_window is not None:
            hidden |= positions < (context_lens - sliding_window)[:, None]
        empty = context_lens == 0
        return ContextMask(
            hidden[:, None, None, :], empty[:, None, None] if bool(empty.any()) else None
        )


@dataclass(frozen=True, slots=True)
class DenseLayout:
    """Where a batch's cached blocks go in the dense [B, Hk, L, D] layout: row b's blocks
    first, from the first block its window reaches (block 0 without a window), then
    padding; L is the most blocks any row needs, in tokens."""

    block_ids: torch.Tensor  # [B * L / block_size] int64, the cache block of each slot
    batch: int
    length: int
    mask: ContextMask

    @staticmethod
    def of(
        block_tables: torch.Tensor,
        context_lens: torch.Tensor,
        block_size: int,
        max_context: int | None = None,
        sliding_window: int | None = None,
    ) -> DenseLayout:
        if sliding_window is None:
            if max_context is None:
                max_context = int(context_lens.max()) if context_lens.numel() else 0
            blocks_needed = -(-max_context // block_size)
            length = blocks_needed * block_size
            block_ids = block_tables[:, :blocks_needed].long()
            block_starts = torch.arange(0, length, block_size, device=block_tables.device)
            # Table entries past a sequence's last block may hold padding: point them at
            # block 0 so the gather stays in bounds; those positions are masked anyway.
            block_ids = torch.where(block_starts[None, :] < context_lens[:, None], block_ids, 0)
            return DenseLayout(
                block_ids.flatten(),
                block_tables.shape[0],
                length,
                ContextMask.of(context_lens, length),
            )
        # Blocks wholly before a row's window are never gathered: their table entries may
        # already be back in the pool (BlockManager frees them), and a window's cost is
        # bounded by its size, not by the context.
        first_blocks = first_visible_positions(context_lens, sliding_window) // block_size
        end_blocks = (context_lens + block_size - 1) // block_size
        blocks_needed = int((end_blocks - first_blocks).max()) if context_lens.numel() else 0
        length = blocks_needed * block_size
        table_index = first_blocks[:, None].long() + torch.arange(
            blocks_needed, device=block_tables.device
        )
        in_row = table_index < end_blocks[:, None]
        table_index = table_index.clamp(max=max(block_tables.shape[1] - 1, 0))
        block_ids = torch.where(in_row, block_tables.long().gather(1, table_index), 0)
        mask = ContextMask.of(
            context_lens, length, start=first_blocks * block_size, sliding_window=sliding_window
        )
        return DenseLayout(block_ids.flatten(), block_tables.shape[0], length, mask)


def gather_dense_kv(
    k_cache: torch.Tensor, v_cache: torch.Tensor, layout: DenseLayout
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's blocks as fp32 [B, Hk, L, D], in `layout`."""
    num_blocks, _, num_kv_heads, head_dim = k_cache.shape

    def gather(cache: torch.Tensor) -> torch.Tensor:
        rows = cache.view(num_blocks, -1).index_select(0, layout.block_ids)
        heads_first = rows.view(layout.batch, layout.length, num_kv_heads, head_dim).transpose(1, 2)
        dense = torch.empty(heads_first.shape, dtype=torch.float32, device=cache.device)
        return dense.copy_(heads_first)

    return gather(k_cache), gather(v_cache)


def attend_dense(
    q: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    mask: ContextMask,
    scale: float,
) -> torch.Tensor:
    """q[B, Hq, D] over contiguous fp32 keys/values [B, Hk, L, D], row b seeing what
    `mask` leaves it. Each row's bits depend on its own inputs and L only."""
    batch, num_heads, head_dim = q.shape
    num_kv_heads = keys.shape[1]
    group = num_heads // num_kv_heads
    queries = q.view(batch, num_kv_heads, group, head_dim).float() * scale
    scores = torch.matmul(queries, keys.transpose(-1, -2))  # [B, Hk, G, L]
    scores.masked_fill_(mask.hidden, float("-inf"))
    out = torch.matmul(torch.softmax(scores, dim=-1), values).view(batch, num_heads, head_dim)
    if mask.empty_rows is not None:
        # Rows with no context come out of softmax as NaN; give them zeros like the kernel.
        out.masked_fill_(mask.empty_rows, 0.0)
    return out.to(q.dtype)
