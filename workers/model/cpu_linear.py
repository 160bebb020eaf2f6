"""Linear layers with weights prepacked once for oneDNN, the CPU path's fast matmul.

On a CPU the forward pass is bound by its matrix multiplies; oneDNN's blocked weight
layout, prepared at load instead of on every call, makes them about twice as fast.
"""

from __future__ import annotations

import torch
from torch import nn


def prepacking_available(device: torch.device, dtype: torch.dtype) -> bool:
    if device.type != "cpu" or not torch.backends.mkldnn.is_available():
        return False
    if not hasattr(torch.ops.mkldnn, "_reorder_linear_weight"):
        return False
    if dtype == torch.float32:
        return True
    # bf16 only where the CPU has native bf16 dot products (AVX512-BF16 or AMX).
    return dtype == torch.bfloat16 and torch.ops.mkldnn._is_mkldnn_bf16_supported()


class PrepackedLinear(nn.Module):
    """`nn.Linear` in oneDNN's layout, computing in its weight's dtype; inference only.

    Inputs of another dtype (a float32 model whose linears compute in bfloat16) are cast
    to the weight's, and the output is cast back to the input's.
    """

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, batch_hint: int) -> None:
        super().__init__()
        self.in_features = weight.shape[1]
        self.out_features = weight.shape[0]
        self.dtype = weight.dtype
        self.register_buffer("packed_weight", torch.ops.mkldnn._reorder_linear_weight(weight, batch_hint))
        self.row_block = ROW_BLOCK.get(weight.dtype)
        self.register_buffer(
            "bias", None if bias is None else bias.detach().to(weight.dtype).clone()
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype != self.dtype:
            return self._forward(x.to(self.dtype)).to(x.dtype)
        return self._forward(x)

    def _forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, self.in_features)
        rows = flat.shape[0]
        block = self.row_block
        if block is None:
            if rows == 1:  # see ROW_BLOCK
                flat = flat.expand(2, -1).contiguous()
            out = self._matmul(flat)
        else:
            if rows % block:
                flat = torch.cat([flat, flat[:1].expand(block - rows % block, -1)])
            if flat.shape[0] == block:  # the common decode case: one block, nothing to join
                out = self._matmul(flat)
            else:
                out = torch.cat([self._matmul(part) for part in flat.split(block)])
        return out[:rows].reshape(*x.shape[:-1], self.out_features)

    def _matmul(self, flat: torch.Tensor) -> torch.Tensor:
        return torch.ops.mkldnn._linear_pointwise(flat, self.packed_weight, self.bias, "none", [], "")


# oneDNN picks its kernel by the number of rows (and threads), and kernels sum in
# different orders, so a row's bits could depend on what else is in its batch. In fp32
# only a lone row takes another kernel: it runs as two. In bf16 (AMX, AVX512-BF16) the
# kernel changes over a range of row counts, so every product runs in blocks of exactly
# this many rows, one kernel for all: what a sequence generates never depends on its
# batch. Reading the weights dominates these small products (docs/performance.md).
ROW_BLOCK = {torch.bfloat16: 16}


def prepack_linears(
    model: nn.Module, dtype: torch.dtype | None = None, batch_hint: int = 32
) -> int:
    """Swap every nn.Linear in `model` for its prepacked form computing in `dtype` (default:
    the weight's own); returns how many."""
    swapped = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, nn.Linear):
                weight = child.weight.detach()
                packed = PrepackedLinear(weight.to(dtype or weight.dtype), child.bias, batch_hint)
                setattr(parent, name, packed)
                swapped += 1
    return swapped
