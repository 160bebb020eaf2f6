"""The gated MLP activation silu(gate) * up: the kernel, its launcher and the torch reference."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from kernels._launch import FLOAT_DTYPES, check_launchable, check_tensor, tl, triton


@triton.jit
def _silu_and_mul_kernel(
    x_ptr,
    out_ptr,
    x_row_stride,
    intermediate_size,
    BLOCK_SIZE: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    columns = tl.program_id(1) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    in_row = columns < intermediate_size
    gate = tl.load(x_ptr + row * x_row_stride + columns, mask=in_row, other=0.0).to(tl.float32)
    up = tl.load(
        x_ptr + row * x_row_stride + intermediate_size + columns, mask=in_row, other=0.0
    ).to(tl.float32)
    activated = gate * tl.sigmoid(gate) * up
    tl.store(
        out_ptr + row * intermediate_size + columns,
        activated.to(out_ptr.dtype.element_ty),
        mask=in_row,
    )


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    """x[T, 2I] holds gate then up; return silu(gate) * up as [T, I]."""
    check_tensor("x", x, ndim=2, dtypes=FLOAT_DTYPES)
    num_tokens, width = x.shape
    if width % 2 != 0:
        raise ValueError(f"x's last dim must be even (gate and up halves), got {width}")
    check_launchable(x=x)
    intermediate_size = width // 2
    out = torch.empty((num_tokens, intermediate_size), dtype=x.dtype, device=x.device)
    if num_tokens > 0 and intermediate_size > 0:
        block_size = min(triton.next_power_of_2(intermediate_size), 1024)
        grid = (num_tokens, triton.cdiv(intermediate_size, block_size))
        _silu_and_mul_kernel[grid](
            x, out, x.stride(0), intermediate_size, BLOCK_SIZE=block_size, num_warps=4
        )
    return out


def silu_and_mul_ref(x: torch.Tensor) -> torch.Tensor:
    """Plain-torch silu(gate) * up, computed in fp32."""
    width = x.shape[-1]
    if width % 2 != 0:
        raise ValueError(f"x's last dim must be even (gate and up halves), got {width}")
    gate, up = x[..., : width // 2], x[..., width // 2 :]
    if x.dtype == torch.float32:
        return F.silu(gate) * up
    return F.silu(gate.float()).mul_(up).to(x.dtype)
