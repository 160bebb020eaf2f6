"""The experts of a mixture-of-experts layer, grouped by expert: each token's hidden row
through the SwiGLU MLPs of the experts it was routed to, weighted and summed. The Triton
kernel is a grouped GEMM (one program per block of the token-expert pairs one expert
holds and per output tile); the torch reference batches the used experts in one bmm.
Neither loops over experts in Python.

Shapes: hidden [T, H]; gate_up [E, 2I, H] (gate rows, then up rows); down [E, H, I];
expert_ids [T, K] (int); expert_weights [T, K] (float). Returns [T, H] in hidden's dtype.
"""

from __future__ import annotations

import torch

from kernels._launch import (
    FLOAT_DTYPES,
    check_launchable,
    check_shape,
    check_tensor,
    dot_precision,
    tl,
    triton,
    upcast_dot_inputs,
)
from kernels.silu_and_mul import silu_and_mul, silu_and_mul_ref

# Pairs per program: an expert's pairs are padded to a multiple of it.
BLOCK_M = 16


@triton.jit
def _moe_experts_kernel(
    a_ptr, b_ptr, c_ptr,
    pair_ids_ptr, block_experts_ptr, pair_weights_ptr,
    num_pairs, N, K, top_k,
    a_row_stride, b_expert_stride, b_row_stride, c_row_stride,
    GATHER_A: tl.constexpr, SCATTER_C: tl.constexpr, WEIGHTED: tl.constexpr,
    UPCAST: tl.constexpr, PRECISION: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):
    """C[rows] = A[rows] @ B[expert].T for one block of padded pair slots and one N tile.

    Slot s holds pair pair_ids[s] (num_pairs where padding); the block's expert is
    block_experts[block] (-1 past the last used block). GATHER_A reads A's row of the
    pair's token (pair // top_k), else the slot's own row; SCATTER_C writes C's row of the
    pair, else the slot's; WEIGHTED scales each row by its pair's routing weight."""
    block = tl.program_id(0)
    tile = tl.program_id(1)
    expert = tl.load(block_experts_ptr + block)
    slots = block * BLOCK_M + tl.arange(0, BLOCK_M)
    pairs = tl.load(pair_ids_ptr + slots)
    # Blocks past the used ones hold padding alone, so their expert (-1) is never read.
    valid = pairs < num_pairs
    expert = tl.maximum(expert, 0).to(tl.int64)
    if GATHER_A:
        a_rows = (pairs // top_k).to(tl.int64)
    else:
        a_rows = slots.to(tl.int64)
    if SCATTER_C:
        c_rows = pairs.to(tl.int64)
    else:
        c_rows = slots.to(tl.int64)
    columns = tile * BLOCK_N + tl.arange(0, BLOCK_N)
    in_n = columns < N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for start in range(0, K, BLOCK_K):
        inner = start + tl.arange(0, BLOCK_K)
        in_k = inner < K
        a = tl.load(a_ptr + a_rows[:, None] * a_row_stride + inner[None, :],
                    mask=valid[:, None] & in_k[None, :], other=0.0)
        b = tl.load(b_ptr + expert * b_expert_stride + columns[None, :] * b_row_stride
                    + inner[:, None], mask=in_k[:, None] & in_n[None, :], other=0.0)
        if UPCAST:
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        acc += tl.dot(a, b, input_precision=PRECISION)
    if WEIGHTED:
        acc *= tl.load(pair_weights_ptr + pairs, mask=valid, other=0.0).to(tl.float32)[:, None]
    tl.store(c_ptr + c_rows[:, None] * c_row_stride + columns[None, :],
             acc.to(c_ptr.dtype.element_ty), mask=valid[:, None] & in_n[None, :])


def align_pairs(
    expert_ids: torch.Tensor, num_experts: int, block_m: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """(pair_ids, block_experts): the T*K token-expert pairs sorted by expert, each
    expert's run padded to a multiple of block_m with the id T*K, and each block's expert
    (-1 past the used ones). Sized for the worst case, so nothing waits on the device."""
    flat = expert_ids.reshape(-1).long()
    num_pairs = flat.numel()
    counts = torch.bincount(flat, minlength=num_experts)
    padded_ends = torch.cumsum((counts + block_m - 1) // block_m * block_m, 0)
    order = torch.argsort(flat, stable=True)
    by_expert = flat[order]
    starts = torch.cumsum(counts, 0) - counts
    padded_starts = padded_ends - (counts + block_m - 1) // block_m * block_m
    slots = padded_starts[by_expert] + torch.arange(num_pairs, device=flat.device) - starts[by_expert]
    blocks = -(-(num_pairs + min(num_experts, num_pairs) * (block_m - 1)) // block_m)
    pair_ids = torch.full((blocks * block_m,), num_pairs, dtype=torch.int32, device=flat.device)
    pair_ids[slots] = order.to(torch.int32)
    block_starts = torch.arange(blocks, device=flat.device) * block_m
    block_experts = torch.searchsorted(padded_ends, block_starts, right=True)
    block_experts = torch.where(block_experts < num_experts, block_experts, -1).to(torch.int32)
    return pair_ids, block_experts


def _check(hidden: torch.Tensor, gate_up: torch.Tensor, down: torch.Tensor,
           expert_ids: torch.Tensor, expert_weights: torch.Tensor) -> None:
    check_tensor("hidden", hidden, ndim=2, dtypes=FLOAT_DTYPES)
    check_tensor("gate_up", gate_up, ndim=3, dtypes=(hidden.dtype,))
    experts, width, hidden_size = gate_up.shape
    check_shape("hidden", hidden, (hidden.shape[0], hidden_size))
    check_tensor("down", down, ndim=3, dtypes=(hidden.dtype,))
    check_shape("down", down, (experts, hidden_size, width // 2))
    check_tensor("expert_ids", expert_ids, ndim=2, dtypes=(torch.int32, torch.int64))
    check_tensor("expert_weights", expert_weights, ndim=2, dtypes=FLOAT_DTYPES)
    check_shape("expert_weights", expert_weights, tuple(expert_ids.shape))
    if expert_ids.shape[0] != hidden.shape[0]:
        raise ValueError(f"expert_ids has {expert_ids.shape[0]} rows, hidden {hidden.shape[0]}")


def _grouped_gemm(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, pair_ids: torch.Tensor,
                  block_experts: torch.Tensor, weights: torch.Tensor, top_k: int,
                  gather: bool) -> None:
    """The gate/up GEMM (gather=True: token rows in, slot rows out) or the down GEMM
    (slot rows in, weighted pair rows out)."""
    n, k = b.shape[1], b.shape[2]
    block_n = min(64, max(16, triton.next_power_of_2(n)))
    block_k = min(64, max(16, triton.next_power_of_2(k)))
    grid = (block_experts.numel(), triton.cdiv(n, block_n))
    _moe_experts_kernel[grid](
        a, b, c, pair_ids, block_experts, weights,
        weights.numel(), n, k, top_k,
        a.stride(0), b.stride(0), b.stride(1), c.stride(0),
        GATHER_A=gather, SCATTER_C=not gather, WEIGHTED=not gather,
        UPCAST=upcast_dot_inputs(a.dtype), PRECISION=dot_precision(a.dtype),
        BLOCK_M=BLOCK_M, BLOCK_N=block_n, BLOCK_K=block_k, num_warps=4,
    )


def moe_experts(hidden: torch.Tensor, gate_up: torch.Tensor, down: torch.Tensor,
                expert_ids: torch.Tensor, expert_weights: torch.Tensor) -> torch.Tensor:
    """The routed experts' weighted SwiGLU outputs summed per token, as [T, H]."""
    _check(hidden, gate_up, down, expert_ids, expert_weights)
    check_launchable(hidden=hidden, gate_up=gate_up, down=down, expert_ids=expert_ids)
    for name, tensor in (("gate_up", gate_up), ("down", down)):
        if tensor.stride(1) != tensor.shape[2]:
            raise ValueError(f"{name} must be contiguous in its last two dims")
    tokens, top_k = expert_ids.shape
    if tokens == 0:
        return hidden.new_zeros((0, hidden.shape[1]))
    out = torch.zeros((tokens * top_k, hidden.shape[1]), dtype=torch.float32, device=hidden.device)
    hidden = hidden.contiguous()
    pair_ids, block_experts = align_pairs(expert_ids, gate_up.shape[0], BLOCK_M)
    weights = expert_weights.reshape(-1).float().contiguous()
    gate_up_out = torch.zeros((pair_ids.numel(), gate_up.shape[1]), dtype=hidden.dtype,
                              device=hidden.device)
    _grouped_gemm(hidden, gate_up, gate_up_out, pair_ids, block_experts, weights, top_k, True)
    activated = silu_and_mul(gate_up_out)
    _grouped_gemm(activated, down, out, pair_ids, block_experts, weights, top_k, False)
    return out.reshape(tokens, top_k, hidden.shape[1]).sum(1).to(hidden.dtype)


def moe_experts_ref(hidden: torch.Tensor, gate_up: torch.Tensor, down: torch.Tensor,
                    expert_ids: torch.Tensor, expert_weights: torch.Tensor) -> torch.Tensor:
    """Plain torch: the pairs sorted by expert into a [used experts, most pairs, H] batch
    (short groups zero-padded), then one bmm per projection over the used experts' weights."""
    _check(hidden, gate_up, down, expert_ids, expert_weights)
    tokens, top_k = expert_ids.shape
    flat = expert_ids.reshape(-1).long()
    counts = torch.bincount(flat, minlength=gate_up.shape[0])
    used = torch.nonzero(counts).squeeze(1)
    group_of = torch.cumsum(counts > 0, 0) - 1  # expert -> its place among the used
    order = torch.argsort(flat, stable=True)
    by_expert = flat[order]
    rank = torch.arange(flat.numel(), device=flat.device) - (torch.cumsum(counts, 0) - counts)[by_expert]
    groups, most = used.numel(), int(counts.max()) if flat.numel() else 0
    batch = hidden.new_zeros((groups, most, hidden.shape[1]))
    batch[group_of[by_expert], rank] = hidden[order // top_k]
    gate_up_out = torch.bmm(batch, gate_up.index_select(0, used).transpose(1, 2))
    activated = silu_and_mul_ref(gate_up_out)
    down_out = torch.bmm(activated, down.index_select(0, used).transpose(1, 2))
    rows = down_out[group_of[by_expert], rank].float()
    rows *= expert_weights.reshape(-1)[order].float().unsqueeze(1)
    out = torch.zeros((tokens, hidden.shape[1]), dtype=torch.float32, device=hidden.device)
    out.index_add_(0, order // top_k, rows)
    return out.to(hidden.dtype)
