"""Writes a step's keys and values into the paged KV cache by slot: kernel, launcher, reference."""

from __future__ import annotations

import torch

from kernels._launch import (
    FLOAT_DTYPES,
    check_contiguous,
    check_launchable,
    check_shape,
    check_tensor,
    tl,
    triton,
)
from kernels.step_memo import per_step


@triton.jit
def _store_kv_cache_kernel(
    k_ptr,
    v_ptr,
    k_cache_ptr,
    v_cache_ptr,
    slot_mapping_ptr,
    k_token_stride,
    k_head_stride,
    v_token_stride,
    v_head_stride,
    num_kv_heads,
    head_dim,
    BLOCK_HEADS: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    token = tl.program_id(0).to(tl.int64)
    slot = tl.load(slot_mapping_ptr + token)
    heads = tl.arange(0, BLOCK_HEADS)
    dims = tl.arange(0, BLOCK_D)
    # Slot -1 marks padding tokens: they are masked out rather than written. The slot is
    # broadcast to a vector first because a scalar-and-tensor mask trips the interpreter.
    slot_per_head = tl.zeros([BLOCK_HEADS], dtype=tl.int64) + slot
    mask = (
        (heads[:, None] < num_kv_heads) & (dims[None, :] < head_dim) & (slot_per_head[:, None] >= 0)
    )
    k = tl.load(
        k_ptr + token * k_token_stride + heads[:, None] * k_head_stride + dims[None, :],
        mask=mask,
    )
    v = tl.load(
        v_ptr + token * v_token_stride + heads[:, None] * v_head_stride + dims[None, :],
        mask=mask,
    )
    # The cache is contiguous [blocks, block_size, Hk, D], so slot s starts at s * Hk * D.
    cache_offsets = slot * num_kv_heads * head_dim + heads[:, None] * head_dim + dims[None, :]
    tl.store(k_cache_ptr + cache_offsets, k.to(k_cache_ptr.dtype.element_ty), mask=mask)
    tl.store(v_cache_ptr + cache_offsets, v.to(v_cache_ptr.dtype.element_ty), mask=mask)


def store_kv_cache(
    k: torch.Tensor,
    v: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
) -> None:
    """Write k[T, Hk, D] and v[T, Hk, D] at slot_mapping[T] of the caches; slot -1 is skipped.

    Slots are not range-checked on the host (that would sync with the GPU).
    """
    check_tensor("k", k, ndim=3, dtypes=FLOAT_DTYPES)
    num_tokens, num_kv_heads, head_dim = k.shape
    check_tensor("v", v, ndim=3, dtypes=FLOAT_DTYPES)
    check_shape("v", v, tuple(k.shape))
    check_tensor("k_cache", k_cache, ndim=4, dtypes=FLOAT_DTYPES)
    if tuple(k_cache.shape[2:]) != (num_kv_heads, head_dim):
        raise ValueError(
            f"k_cache must be [blocks, block_size, {num_kv_heads}, {head_dim}], "
            f"got {tuple(k_cache.shape)}"
        )
    check_tensor("v_cache", v_cache, ndim=4, dtypes=(k_cache.dtype,))
    check_shape("v_cache", v_cache, tuple(k_cache.shape))
    check_contiguous("k_cache", k_cache)
    check_contiguous("v_cache", v_cache)
    check_tensor(
        "slot_mapping", slot_mapping, ndim=1, dtypes=(torch.int64,), inner_contiguous=False
    )
    check_shape("slot_mapping", slot_mapping, (num_tokens,))
    check_launchable(k=k, v=v, k_cache=k_cache, v_cache=v_cache, slot_mapping=slot_mapping)
    if num_tokens == 0:
        return
    slot_mapping = slot_mapping.contiguous()
    _store_kv_cache_kernel[(num_tokens,)](
        k,
        v,
        k_cache,
        v_cache,
        slot_mapping,
        k.stride(0),
        k.stride(1),
        v.stride(0),
        v.stride(1),
        num_kv_heads,
        head_dim,
        BLOCK_HEADS=triton.next_power_of_2(num_kv_heads),
        BLOCK_D=triton.next_power_of_2(head_dim),
        num_warps=1,
    )


def store_kv_cache_ref(
    k: torch.Tensor,
    v: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
) -> None:
    """Plain-torch scatter of each token's k and v to its slot; slot -1 is skipped."""
    num_slots = k_cache.shape[0] * k_cache.shape[1]
    # Which tokens are written is the same in every layer of a step: decided once.
    written = per_step("store_kv_cache_ref", (slot_mapping,), None, lambda: _written(slot_mapping))
    if written is not None:
        rows, slot_mapping = written
        k, v = k[rows], v[rows]
    # view (not reshape) so a cache layout that cannot be flattened fails instead of
    # silently writing into a copy.
    k_cache.view(num_slots, *k_cache.shape[2:]).index_copy_(0, slot_mapping, k.to(k_cache.dtype))
    v_cache.view(num_slots, *v_cache.shape[2:]).index_copy_(0, slot_mapping, v.to(v_cache.dtype))


def _written(slot_mapping: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(rows to write, their slots) when some slot is -1; None when every row is written."""
    if slot_mapping.numel() == 0 or int(slot_mapping.min()) >= 0:
        return None
    rows = slot_mapping >= 0
    return rows, slot_mapping[rows]
