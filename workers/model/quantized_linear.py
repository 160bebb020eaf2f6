"""Linear layers that compute with a GGUF file's own 4- and 8-bit weights on a CPU.

Decoding one token reads every weight once, so at small batches a step costs what its
weights weigh: 4-bit groups are about a quarter of bf16. Where the fused CPU ops build
(kernels/cpu_ops.py), `GroupLinear` reads the file's blocks as they are and computes in
float32 with exactly the dequantized weights; elsewhere torch's weight-only matmuls
(`_weight_int4pack_mm_for_cpu`, `_weight_int8pack_mm`) compute in bfloat16.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import cast

import torch
from torch import nn

from kernels import cpu_ops
from workers.model.cpu_linear import PrepackedLinear
from workers.model.group_quantized import GROUP_SIZE, GroupQuantized, concat_rows
from workers.model.k_quants import KQuantized
from workers.model.row_stack import RowStack, StackedLinear
from workers.model.weights import FUSED_PROJECTIONS

# The int4 kernel stores codes as q + 8 in 0..15 and computes (q - 8) * scale + zero.
_INT4_OFFSET = 8
# Column tiles the int4 packing interleaves; 8 is what the CPU kernel is tuned for.
_INNER_K_TILES = 8


def quantized_matmuls_available(device: torch.device) -> bool:
    ops = torch.ops.aten
    torch_kernels = (
        hasattr(ops, "_weight_int4pack_mm_for_cpu")
        and hasattr(ops, "_convert_weight_to_int4pack_for_cpu")
        and hasattr(ops, "_weight_int8pack_mm")
    )
    return device.type == "cpu" and (cpu_ops.available() or torch_kernels)


class GroupLinear(nn.Module):
    """A Q4_0 / Q4_1 / Q8_0 weight, or a Q4_K / Q5_K / Q6_K one in the file's own
    super-blocks, computed by the fused CPU op `quantized_linear`.

    Each group of 32 is decoded in registers to exactly the float32 weights
    `dequantize` gives (gguf-py's for the K-quants), and each output is one thread's float32 sum in one
    fixed order (kernels/cpu/quantized_linear.cpp): a row's bits depend neither on its batch nor on
    the thread count, and the only difference from the dequantized reference is the
    order of the sum. Inputs of any float dtype are computed in float32.
    """

    def __init__(self, weight: GroupQuantized | KQuantized, bias: torch.Tensor | None):
        super().__init__()
        self.out_features, self.in_features = weight.shape
        self.bits = weight.bits
        self.register_buffer("bias", None if bias is None else bias.detach().float().clone())
        if isinstance(weight, KQuantized):
            # The file's bytes as they are; no scales beside them tells the op so.
            self.offset = weight.offset
            self.register_buffer("codes", weight.blocks.contiguous())
            self.register_buffer("scales", torch.empty(self.out_features, 0))
            self.register_buffer("mins", None)
            return
        codes = weight.codes
        self.offset = 0
        if self.bits == 4:
            if weight.mins is None:  # Q4_0: codes -8..7 are stored as 0..15
                codes = codes.to(torch.int16) + _INT4_OFFSET
                self.offset = _INT4_OFFSET
            # Byte j of a group: code j in the low nibble, code j + 16 in the high one,
            # as the file stores it.
            grouped = codes.to(torch.uint8).reshape(self.out_features, -1, 2, GROUP_SIZE // 2)
            codes = grouped[:, :, 0] | (grouped[:, :, 1] << 4)
            codes = codes.reshape(self.out_features, self.in_features // 2)
        self.register_buffer("codes", codes.contiguous())
        # float32: kept as the file's float16 they would read a fifth fewer bytes, which
        # measured no faster (converting them in the kernel costs what the bytes save).
        self.register_buffer("scales", weight.scales.float().contiguous())
        mins = weight.mins
        self.register_buffer("mins", None if mins is None else mins.float().contiguous())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, self.in_features).to(torch.float32).contiguous()
        out = cpu_ops.quantized_linear(
            flat, self._buffer("codes"), self._buffer("scales"), self._optional("mins"),
            self.bits, self.offset,
        )
        bias = self.bias
        if isinstance(bias, torch.Tensor):
            out = out + bias
        return out.reshape(*x.shape[:-1], self.out_features).to(x.dtype)

    def op_weight(self) -> torch.ScriptObject:
        """This weight as the fused decoder layers hold it (kernels.cpu_ops.quantized_weight)."""
        return cpu_ops.quantized_weight(
            self._buffer("codes"), self._buffer("scales"), self._optional("mins"), self.bits,
            self.offset,
        )

    def _buffer(self, name: str) -> torch.Tensor:
        return cast(torch.Tensor, getattr(self, name))

    def _optional(self, name: str) -> torch.Tensor | None:
        value = getattr(self, name)
        return value if isinstance(value, torch.Tensor) else None


def only_group_linears(model: nn.Module) -> bool:
    """Whether every linear layer of `model` is a `GroupLinear`: then a row's bits depend
    on no batch and no thread count as far as its matmuls go."""
    linears = [
        module for module in model.modules()
        if isinstance(module, (nn.Linear, PrepackedLinear, GroupLinear, Int4Linear, Int8Linear))
    ]
    return bool(linears) and all(isinstance(module, GroupLinear) for module in linears)


def rows_invariant_linears(model: nn.Module) -> bool:
    """Whether every linear layer of `model`, the logits' included, gives a row the same
    bits however many rows share its call: the fused quantized op and oneDNN's prepacked
    linears (cpu_linear.py) do; torch's int4/int8 kernels and plain `nn.Linear` do not."""
    lm_head = getattr(model, "lm_head", None) or getattr(model, "tied_lm_head", None)
    linears = [
        module for module in model.modules()
        if isinstance(module, (nn.Linear, PrepackedLinear, GroupLinear, Int4Linear, Int8Linear))
    ]
    return lm_head is not None and all(
        isinstance(module, (PrepackedLinear, GroupLinear)) for module in linears
    )


class Int4Linear(nn.Module):
    """A Q4_0 / Q4_1 weight as torch's int4 CPU kernel wants it; exact for both kinds.

    Q4_1's d * q + m is (q - 8) * d + (m + 8 d), so scale d and zero m + 8 d (in the
    activation dtype; bf16 rounds them like it rounds a dense weight). Each output row is
    summed in one fixed order whatever the batch (tests/workers/model/test_quantized_linear.py),
    so unlike oneDNN's bf16 kernel it needs no fixed row blocks.
    """

    def __init__(self, weight: GroupQuantized, bias: torch.Tensor | None, dtype: torch.dtype):
        super().__init__()
        if weight.bits != 4:
            raise ValueError(f"Int4Linear takes a 4-bit weight, got {weight.kind}")
        self.out_features, self.in_features = weight.shape
        self.dtype = dtype
        codes = weight.codes.to(torch.int32)
        if weight.mins is None:  # Q4_0: codes are -8..7, no min
            codes = codes + _INT4_OFFSET
            zeros = torch.zeros_like(weight.scales)
        else:
            zeros = weight.mins + _INT4_OFFSET * weight.scales
        self.register_buffer(
            "packed_weight",
            torch.ops.aten._convert_weight_to_int4pack_for_cpu(codes.contiguous(), _INNER_K_TILES),
        )
        # [K / 32, N, 2]: per group, per output row, (scale, zero).
        scale_and_zero = torch.stack([weight.scales, zeros], dim=-1).transpose(0, 1)
        self.register_buffer("scale_and_zero", scale_and_zero.to(dtype).contiguous())
        self.register_buffer("bias", None if bias is None else bias.detach().to(dtype).clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, self.in_features).to(self.dtype).contiguous()
        out: torch.Tensor = torch.ops.aten._weight_int4pack_mm_for_cpu(
            flat, self.packed_weight, GROUP_SIZE, self.scale_and_zero
        )
        bias = self.bias
        if isinstance(bias, torch.Tensor):
            out = out + bias
        return out.reshape(*x.shape[:-1], self.out_features).to(x.dtype)


class Int8Linear(nn.Module):
    """An 8-bit weight with one scale per output row, for torch's int8 CPU kernel.

    Q8_0 keeps a scale per 32 columns, which this kernel cannot take, so each row is
    quantized again to one scale (its largest magnitude over 127): the one step here that
    is not exact, an error of at most half that scale per weight, of the order of bf16's
    own rounding (docs/internals.md states the logit tolerance the tests hold it to).
    """

    def __init__(
        self, weight: GroupQuantized | KQuantized, bias: torch.Tensor | None, dtype: torch.dtype
    ):
        super().__init__()
        self.out_features, self.in_features = weight.shape
        self.dtype = dtype
        dense = weight.dequantize()
        row_scales = dense.abs().amax(dim=1).clamp_min(torch.finfo(torch.float32).tiny) / 127.0
        codes = torch.round(dense / row_scales[:, None]).clamp(-127, 127).to(torch.int8)
        self.register_buffer("codes", codes.contiguous())
        self.register_buffer("row_scales", row_scales.to(dtype))
        self.register_buffer("bias", None if bias is None else bias.detach().to(dtype).clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, self.in_features).to(self.dtype).contiguous()
        out: torch.Tensor = torch.ops.aten._weight_int8pack_mm(flat, self.codes, self.row_scales)
        bias = self.bias
        if isinstance(bias, torch.Tensor):
            out = out + bias
        return out.reshape(*x.shape[:-1], self.out_features).to(x.dtype)


# What the quantized matmuls compute in, whatever the model's dtype: bfloat16 is these
# kernels' vectorized path on every x86 CPU. In float32 they are several times slower
# than a dense float32 linear where the CPU has no native bf16 (an AVX2 CPU, one row:
# int8 710 us against 76 us for a 1536x576 projection; docs/performance.md).
COMPUTE_DTYPE = torch.bfloat16


def quantized_linear(
    weight: GroupQuantized | KQuantized | RowStack,
    bias: torch.Tensor | None,
    dtype: torch.dtype = COMPUTE_DTYPE,
    fused: bool | None = None,
) -> nn.Module:
    """The quantized form of a linear layer, answering in the dtype of its input: the
    fused op's exact float32 `GroupLinear` where `fused` (default: where the fused CPU ops
    build), else torch's kernels computing in `dtype` (K-quants requantized for the int8
    one, as Q8_0 is). A RowStack is one linear per part."""
    if fused is None:
        fused = cpu_ops.available()
    if isinstance(weight, RowStack):
        rows = [part.shape[0] for part in weight.parts]
        biases = [None] * len(rows) if bias is None else list(bias.split(rows))
        return StackedLinear([
            quantized_linear(part, part_bias, dtype, fused)
            for part, part_bias in zip(weight.parts, biases, strict=True)
        ], rows)
    if fused:
        return GroupLinear(weight, bias)
    if isinstance(weight, KQuantized):
        return Int8Linear(weight, bias, dtype)
    if weight.bits == 4:
        return Int4Linear(weight, bias, dtype)
    return Int8Linear(weight, bias, dtype)


_SHARDS = {"qkv_proj": 3, "gate_up_proj": 2}


def fuse_by_module(
    tensors: Iterable[tuple[str, GroupQuantized | KQuantized]],
) -> dict[str, GroupQuantized | KQuantized | RowStack]:
    """Hugging Face named weights -> the model's module names, q/k/v and gate/up fused."""
    shards: dict[str, dict[int, GroupQuantized | KQuantized]] = {}
    for name, weight in tensors:
        path = name.removeprefix("model.").removesuffix(".weight").split(".")
        fused = FUSED_PROJECTIONS.get(path[-1])
        if path[-1] in _SHARDS:
            # Stored fused already (Phi-3): stands for all of its shards.
            shards[".".join(path)] = dict.fromkeys(range(_SHARDS[path[-1]]), weight)
        elif fused is None:
            shards.setdefault(".".join(path), {})[0] = weight
        else:
            shards.setdefault(".".join(path[:-1] + [fused[0]]), {})[fused[1]] = weight
    # A fused module whose shards are not all quantized (a mixed file) stays dense.
    return {
        module: parts[0]
        if len({id(part) for part in parts.values()}) == 1
        else concat_rows([parts[index] for index in sorted(parts)])
        for module, parts in shards.items()
        if len(parts) == _SHARDS.get(module.rpartition(".")[2], 1)
    }
