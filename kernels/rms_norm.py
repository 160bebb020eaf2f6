"""RMSNorm with an optional fused residual add: the kernel, its launcher and the torch reference."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from kernels._launch import FLOAT_DTYPES, check_launchable, check_shape, check_tensor, tl, triton


@triton.jit
def _rms_norm_kernel(
    x_ptr,
    residual_ptr,
    weight_ptr,
    out_ptr,
    residual_out_ptr,
    x_row_stride,
    residual_row_stride,
    hidden_size,
    eps,
    HAS_RESIDUAL: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    columns = tl.arange(0, BLOCK_SIZE)
    in_row = columns < hidden_size
    x = tl.load(x_ptr + row * x_row_stride + columns, mask=in_row, other=0.0).to(tl.float32)
    if HAS_RESIDUAL:
        residual = tl.load(
            residual_ptr + row * residual_row_stride + columns, mask=in_row, other=0.0
        ).to(tl.float32)
        # Round the sum to the storage dtype before normalizing, as the unfused model does.
        summed = (x + residual).to(residual_out_ptr.dtype.element_ty)
        tl.store(residual_out_ptr + row * hidden_size + columns, summed, mask=in_row)
        x = summed.to(tl.float32)
    variance = tl.sum(x * x, axis=0) / hidden_size
    inverse_rms = 1.0 / tl.sqrt(variance + eps)
    weight = tl.load(weight_ptr + columns, mask=in_row, other=0.0).to(tl.float32)
    normed = x * inverse_rms * weight
    tl.store(
        out_ptr + row * hidden_size + columns, normed.to(out_ptr.dtype.element_ty), mask=in_row
    )


def rms_norm(
    x: torch.Tensor, weight: torch.Tensor, eps: float, residual: torch.Tensor | None = None
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """RMS-normalize each row of x[T, H]; with a residual, return (out, x + residual).

    out has x's dtype; the residual may be kept in fp32 under a half-precision x, and the
    sum then stays in fp32.
    """
    check_tensor("x", x, ndim=2, dtypes=FLOAT_DTYPES)
    num_tokens, hidden_size = x.shape
    check_tensor("weight", weight, ndim=1, dtypes=FLOAT_DTYPES)
    check_shape("weight", weight, (hidden_size,))
    if residual is not None:
        check_tensor("residual", residual, ndim=2, dtypes=(x.dtype, torch.float32))
        check_shape("residual", residual, (num_tokens, hidden_size))
    check_launchable(x=x, weight=weight, residual=residual)
    if weight.stride(0) != 1:
        weight = weight.contiguous()

    out = torch.empty((num_tokens, hidden_size), dtype=x.dtype, device=x.device)
    residual_out = (
        torch.empty((num_tokens, hidden_size), dtype=residual.dtype, device=x.device)
        if residual is not None
        else out
    )
    if num_tokens > 0:
        block_size = triton.next_power_of_2(hidden_size)
        _rms_norm_kernel[(num_tokens,)](
            x,
            residual if residual is not None else x,
            weight,
            out,
            residual_out,
            x.stride(0),
            residual.stride(0) if residual is not None else 0,
            hidden_size,
            float(eps),
            HAS_RESIDUAL=residual is not None,
            BLOCK_SIZE=block_size,
            num_warps=min(max(block_size // 256, 1), 8),
        )
    return out if residual is None else (out, residual_out)


def rms_norm_ref(
    x: torch.Tensor, weight: torch.Tensor, eps: float, residual: torch.Tensor | None = None
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Plain-torch RMSNorm: statistics in fp32, result in x's dtype (the sum with the
    residual in the residual's dtype)."""
    out_dtype = x.dtype
    if residual is not None:
        residual = (x + residual).to(residual.dtype)
        x = residual
    # One call on fp32 statistics and weight (on a CPU torch still runs it as several ops;
    # the "cpu" backend fuses it with the residual add, kernels/cpu_ops.py).
    out = F.rms_norm(x.float(), (x.shape[-1],), weight.float(), eps).to(out_dtype)
    return out if residual is None else (out, residual)
