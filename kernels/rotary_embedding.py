"""Neox-style rotary position embedding applied in place to q and k: kernel, launcher, reference."""

from __future__ import annotations

import torch

from kernels._launch import FLOAT_DTYPES, check_launchable, check_shape, check_tensor, tl, triton
from kernels.step_memo import per_step


@triton.jit
def _rotate_heads_in_place(
    x_ptr,
    token_stride,
    head_stride,
    token,
    num_heads,
    cos,
    sin,
    half_dim,
    BLOCK_HEADS: tl.constexpr,
    BLOCK_HALF: tl.constexpr,
):
    heads = tl.arange(0, BLOCK_HEADS)
    pairs = tl.arange(0, BLOCK_HALF)
    mask = (heads[:, None] < num_heads) & (pairs[None, :] < half_dim)
    first_ptrs = x_ptr + token * token_stride + heads[:, None] * head_stride + pairs[None, :]
    first = tl.load(first_ptrs, mask=mask, other=0.0).to(tl.float32)
    second = tl.load(first_ptrs + half_dim, mask=mask, other=0.0).to(tl.float32)
    rotated_first = first * cos[None, :] - second * sin[None, :]
    rotated_second = second * cos[None, :] + first * sin[None, :]
    tl.store(first_ptrs, rotated_first.to(x_ptr.dtype.element_ty), mask=mask)
    tl.store(first_ptrs + half_dim, rotated_second.to(x_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _rotary_embedding_kernel(
    q_ptr,
    k_ptr,
    positions_ptr,
    cos_sin_ptr,
    q_token_stride,
    q_head_stride,
    k_token_stride,
    k_head_stride,
    cos_sin_stride,
    num_q_heads,
    num_kv_heads,
    half_dim,
    BLOCK_Q_HEADS: tl.constexpr,
    BLOCK_KV_HEADS: tl.constexpr,
    BLOCK_HALF: tl.constexpr,
):
    token = tl.program_id(0).to(tl.int64)
    position = tl.load(positions_ptr + token)
    pairs = tl.arange(0, BLOCK_HALF)
    cos_ptrs = cos_sin_ptr + position * cos_sin_stride + pairs
    cos = tl.load(cos_ptrs, mask=pairs < half_dim, other=0.0).to(tl.float32)
    sin = tl.load(cos_ptrs + half_dim, mask=pairs < half_dim, other=0.0).to(tl.float32)
    _rotate_heads_in_place(
        q_ptr,
        q_token_stride,
        q_head_stride,
        token,
        num_q_heads,
        cos,
        sin,
        half_dim,
        BLOCK_Q_HEADS,
        BLOCK_HALF,
    )
    _rotate_heads_in_place(
        k_ptr,
        k_token_stride,
        k_head_stride,
        token,
        num_kv_heads,
        cos,
        sin,
        half_dim,
        BLOCK_KV_HEADS,
        BLOCK_HALF,
    )


def rotary_embedding(
    q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor, cos_sin_cache: torch.Tensor
) -> None:
    """Rotate q[T, Hq, D] and k[T, Hk, D] in place by each token's position.

    q and k may be strided views (e.g. slices of a fused qkv projection) as long as the
    head dim is unit-stride.
    """
    check_tensor("q", q, ndim=3, dtypes=FLOAT_DTYPES)
    num_tokens, num_q_heads, head_dim = q.shape
    check_tensor("k", k, ndim=3, dtypes=(q.dtype,))
    if k.shape[0] != num_tokens or k.shape[2] != head_dim:
        raise ValueError(f"k must be [{num_tokens}, Hk, {head_dim}], got {tuple(k.shape)}")
    if head_dim % 2 != 0:
        raise ValueError(f"head dim must be even for neox rotation, got {head_dim}")
    check_tensor("positions", positions, ndim=1, dtypes=(torch.int64,), inner_contiguous=False)
    check_shape("positions", positions, (num_tokens,))
    check_tensor("cos_sin_cache", cos_sin_cache, ndim=2, dtypes=FLOAT_DTYPES)
    if cos_sin_cache.shape[1] != head_dim:
        raise ValueError(
            f"cos_sin_cache must be [max_pos, {head_dim}], got {tuple(cos_sin_cache.shape)}"
        )
    check_launchable(q=q, k=k, positions=positions, cos_sin_cache=cos_sin_cache)
    if num_tokens == 0:
        return
    positions = positions.contiguous()
    _rotary_embedding_kernel[(num_tokens,)](
        q,
        k,
        positions,
        cos_sin_cache,
        q.stride(0),
        q.stride(1),
        k.stride(0),
        k.stride(1),
        cos_sin_cache.stride(0),
        num_q_heads,
        k.shape[1],
        head_dim // 2,
        BLOCK_Q_HEADS=triton.next_power_of_2(num_q_heads),
        BLOCK_KV_HEADS=triton.next_power_of_2(k.shape[1]),
        BLOCK_HALF=triton.next_power_of_2(head_dim // 2),
        num_warps=1,
    )


def rotary_embedding_ref(
    q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor, cos_sin_cache: torch.Tensor
) -> None:
    """Plain-torch neox rotation of q and k in place; the math runs in fp32.

    Each half is rotated as x * [cos, cos] + [second, first] * [-sin, sin]: the step's
    two factor rows are taken from the table once and shared by every layer (`per_step`).
    """
    half_dim = q.shape[-1] // 2
    cos_twice, signed_sin = per_step(
        "rotary_embedding_ref",
        (positions, cos_sin_cache),
        half_dim,
        lambda: _rotation_factors(positions, cos_sin_cache, half_dim),
    )
    for x in (q, k):
        if x.dtype == torch.float32:
            swapped = torch.cat((x[..., half_dim:], x[..., :half_dim]), dim=-1)
            x.mul_(cos_twice).addcmul_(swapped, signed_sin)
            continue
        wide = x.float()
        swapped = torch.cat((wide[..., half_dim:], wide[..., :half_dim]), dim=-1)
        x.copy_(wide.mul_(cos_twice).addcmul_(swapped, signed_sin))


def _rotation_factors(
    positions: torch.Tensor, cos_sin_cache: torch.Tensor, half_dim: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """[cos, cos] and [-sin, sin] in fp32 for each position, shaped [T, 1, D]."""
    cos_sin = cos_sin_cache.index_select(0, positions).float()
    cos = cos_sin[:, None, :half_dim]
    sin = cos_sin[:, None, half_dim:]
    return torch.cat((cos, cos), dim=-1), torch.cat((-sin, sin), dim=-1)
