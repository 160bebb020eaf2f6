"""Weight-only int4 matmul for decode: x[M, K] times a 4-bit weight[N, K] stored as GGUF's
Q4_1 stores it (a scale and a min per 32 columns of a row), read without dequantizing it
in memory first. The kernel, its launcher, the torch reference and the packing helper.

Decode reads every weight once per step, so at small M the step costs what the weights
weigh: 4-bit codes plus two scales per 32 weights are under a third of bf16.
"""

from __future__ import annotations

import torch

from kernels._launch import (
    FLOAT_DTYPES,
    check_launchable,
    check_tensor,
    dot_precision,
    tl,
    triton,
    upcast_dot_inputs,
)

GROUP_SIZE = 32


@triton.jit
def _int4_matmul_kernel(
    x_ptr,
    packed_ptr,
    scales_ptr,
    mins_ptr,
    out_ptr,
    M,
    N,
    K,
    x_row_stride,
    out_row_stride,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    GROUP: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
    UPCAST_DOT_INPUTS: tl.constexpr,
):
    # One program: BLOCK_M rows of x against BLOCK_N weight rows, one 32-column group per
    # iteration. Byte j of a row's group holds column 2j (low nibble) and 2j + 1 (high),
    # so even and odd columns are two half-width products summed in fp32.
    HALF: tl.constexpr = GROUP // 2
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    columns = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    pairs = tl.arange(0, HALF)
    row_in = rows < M
    column_in = columns < N
    groups = K // GROUP
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for group in range(0, groups):
        k_even = group * GROUP + 2 * pairs
        x_even = tl.load(
            x_ptr + rows[:, None] * x_row_stride + k_even[None, :], mask=row_in[:, None], other=0.0
        )
        x_odd = tl.load(
            x_ptr + rows[:, None] * x_row_stride + k_even[None, :] + 1,
            mask=row_in[:, None],
            other=0.0,
        )
        codes = tl.load(
            packed_ptr + columns[:, None] * (K // 2) + group * HALF + pairs[None, :],
            mask=column_in[:, None],
            other=0,
        ).to(tl.int32)
        scale = tl.load(scales_ptr + columns * groups + group, mask=column_in, other=0.0)
        low = tl.load(mins_ptr + columns * groups + group, mask=column_in, other=0.0)
        scale = scale.to(tl.float32)[:, None]
        low = low.to(tl.float32)[:, None]
        # The weight is rounded to x's dtype, as a dense weight of that dtype would be.
        w_even = ((codes & 0xF).to(tl.float32) * scale + low).to(x_even.dtype)
        w_odd = ((codes >> 4).to(tl.float32) * scale + low).to(x_odd.dtype)
        if UPCAST_DOT_INPUTS:
            x_even, x_odd = x_even.to(tl.float32), x_odd.to(tl.float32)
            w_even, w_odd = w_even.to(tl.float32), w_odd.to(tl.float32)
        acc += tl.dot(x_even, tl.trans(w_even), input_precision=DOT_PRECISION)
        acc += tl.dot(x_odd, tl.trans(w_odd), input_precision=DOT_PRECISION)
    tl.store(
        out_ptr + rows[:, None] * out_row_stride + columns[None, :],
        acc.to(out_ptr.dtype.element_ty),
        mask=row_in[:, None] & column_in[None, :],
    )


def pack_int4(codes: torch.Tensor) -> torch.Tensor:
    """codes[N, K] with values 0..15 -> packed[N, K / 2] uint8, column 2j in byte j's low nibble."""
    if codes.dim() != 2 or codes.shape[1] % GROUP_SIZE:
        raise ValueError(
            f"codes must be [N, K] with K a multiple of {GROUP_SIZE}, got {tuple(codes.shape)}"
        )
    if codes.numel() and (int(codes.min()) < 0 or int(codes.max()) > 15):
        raise ValueError("4-bit codes must lie in 0..15")
    as_bytes = codes.to(torch.uint8)
    return (as_bytes[:, 0::2] | (as_bytes[:, 1::2] << 4)).contiguous()


def _check(x: torch.Tensor, packed: torch.Tensor, scales: torch.Tensor, mins: torch.Tensor) -> None:
    check_tensor("x", x, ndim=2, dtypes=FLOAT_DTYPES)
    check_tensor("packed", packed, ndim=2, dtypes=(torch.uint8,))
    check_tensor("scales", scales, ndim=2, dtypes=FLOAT_DTYPES)
    check_tensor("mins", mins, ndim=2, dtypes=FLOAT_DTYPES)
    rows, half = packed.shape
    columns = x.shape[1]
    if columns % GROUP_SIZE or half * 2 != columns:
        raise ValueError(
            f"x has {columns} columns; packed [N, K/2] must have K = {columns}, a multiple of "
            f"{GROUP_SIZE}, got packed {tuple(packed.shape)}"
        )
    groups = (rows, columns // GROUP_SIZE)
    if tuple(scales.shape) != groups or tuple(mins.shape) != groups:
        raise ValueError(
            f"scales and mins must be {groups}, got {tuple(scales.shape)} and {tuple(mins.shape)}"
        )


def int4_matmul(
    x: torch.Tensor, packed: torch.Tensor, scales: torch.Tensor, mins: torch.Tensor
) -> torch.Tensor:
    """x[M, K] @ (codes * scale + min)[N, K]^T -> out[M, N] in x's dtype, summed in fp32."""
    _check(x, packed, scales, mins)
    if x.stride(1) != 1:
        raise ValueError("x's rows must be contiguous (stride 1 along K)")
    for name, tensor in (("packed", packed), ("scales", scales), ("mins", mins)):
        if not tensor.is_contiguous():
            raise ValueError(f"{name} must be contiguous")
    check_launchable(x=x, packed=packed, scales=scales, mins=mins)
    rows, columns = x.shape[0], packed.shape[0]
    out = torch.empty((rows, columns), dtype=x.dtype, device=x.device)
    if rows == 0 or columns == 0:
        return out
    # tl.dot needs at least 16 rows a tile; a decode GEMV masks the unused ones.
    block_m = 16 if rows <= 16 else 32
    block_n = 64
    grid = (triton.cdiv(rows, block_m), triton.cdiv(columns, block_n))
    _int4_matmul_kernel[grid](
        x, packed, scales, mins, out, rows, columns, x.shape[1], x.stride(0), out.stride(0),
        BLOCK_M=block_m, BLOCK_N=block_n, GROUP=GROUP_SIZE,
        DOT_PRECISION=dot_precision(x.dtype), UPCAST_DOT_INPUTS=upcast_dot_inputs(x.dtype),
        num_warps=4,
    )
    return out


def int4_matmul_ref(
    x: torch.Tensor, packed: torch.Tensor, scales: torch.Tensor, mins: torch.Tensor
) -> torch.Tensor:
    """Plain torch: unpack, dequantize in fp32 and round to x's dtype (as the kernel does),
    multiply in fp32, return x's dtype."""
    _check(x, packed, scales, mins)
    rows, half = packed.shape
    codes = torch.stack([packed & 0xF, packed >> 4], dim=-1).reshape(rows, half * 2)
    grouped = codes.float().reshape(rows, -1, GROUP_SIZE)
    weight = grouped * scales.float()[..., None] + mins.float()[..., None]
    weight = weight.reshape(rows, half * 2).to(x.dtype).float()
    return (x.float() @ weight.T).to(x.dtype)
