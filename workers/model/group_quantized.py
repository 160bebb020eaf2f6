"""GroupQuantized: a weight as llama.cpp stores it (codes plus a scale, and a min, per 32
columns of a row), decoded from the GGUF block bytes without losing anything; the
K-quants' super-blocks are kept as they are (k_quants.py)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from workers.model.k_quants import K_QUANT_TYPES, KQuantized, concat_k_rows, decode_k_blocks
from workers.model.row_stack import RowStack

GROUP_SIZE = 32
# Bytes of one block of 32 weights: fp16 scale, fp16 min (Q4_1 only), then the codes.
_BLOCK_BYTES = {"Q4_0": 18, "Q4_1": 20, "Q8_0": 34}
SUPPORTED_TYPES = (*_BLOCK_BYTES, *K_QUANT_TYPES)


@dataclass(frozen=True, slots=True)
class GroupQuantized:
    """weight[n, k] = scales[n, g] * codes[n, k] + mins[n, g], g = k // 32.

    Q4_1 codes are 0..15 with a min; Q4_0 codes are -8..7 and Q8_0 codes -128..127, both
    without one (`mins` is None). Every row operation (fusing q/k/v, undoing llama.cpp's
    rope permutation) is exact on this form, since groups never cross rows.
    """

    kind: str
    codes: torch.Tensor  # [N, K] int8 (4-bit kinds hold their nibble value, 8-bit their byte)
    scales: torch.Tensor  # [N, K / 32] float32
    mins: torch.Tensor | None  # [N, K / 32] float32

    @property
    def bits(self) -> int:
        return 8 if self.kind == "Q8_0" else 4

    @property
    def shape(self) -> tuple[int, int]:
        rows, columns = self.codes.shape
        return rows, columns

    def map_rows(self, fn: Callable[[torch.Tensor], torch.Tensor]) -> GroupQuantized:
        """Apply a row-wise function (a permutation of rows) to codes, scales and mins alike."""
        return GroupQuantized(
            self.kind, fn(self.codes), fn(self.scales), None if self.mins is None else fn(self.mins)
        )

    def dequantize(self) -> torch.Tensor:
        """The float32 weight this stands for: the reference every quantized kernel must meet."""
        rows, columns = self.shape
        grouped = self.codes.float().reshape(rows, columns // GROUP_SIZE, GROUP_SIZE)
        weight = grouped * self.scales[..., None]
        if self.mins is not None:
            weight = weight + self.mins[..., None]
        return weight.reshape(rows, columns)


def concat_rows(parts: Sequence[GroupQuantized | KQuantized]) -> GroupQuantized | KQuantized | RowStack:
    """Stack weights along the rows, as q/k/v and gate/up are fused: one weight where all
    parts share a format, else a RowStack of each run of parts that does."""
    runs: list[list[GroupQuantized | KQuantized]] = []
    for part in parts:
        if runs and runs[-1][0].kind == part.kind:
            runs[-1].append(part)
        else:
            runs.append([part])
    stacked = [_concat_one_kind(run) for run in runs]
    return stacked[0] if len(stacked) == 1 else RowStack(tuple(stacked))


def _concat_one_kind(parts: list[GroupQuantized | KQuantized]) -> GroupQuantized | KQuantized:
    if all(isinstance(part, KQuantized) for part in parts):
        return concat_k_rows([part for part in parts if isinstance(part, KQuantized)])
    groups = [part for part in parts if isinstance(part, GroupQuantized)]
    mins = [part.mins for part in groups]
    return GroupQuantized(
        groups[0].kind,
        torch.cat([part.codes for part in groups]),
        torch.cat([part.scales for part in groups]),
        None if any(m is None for m in mins) else torch.cat([m for m in mins if m is not None]),
    )


def decode_blocks(
    kind: str, data: np.ndarray, rows: int, columns: int
) -> GroupQuantized | KQuantized:
    """GGUF block bytes ([rows, bytes per row] uint8) to codes, scales and mins; K-quant
    super-blocks as they are."""
    if kind in K_QUANT_TYPES:
        return decode_k_blocks(kind, data, rows, columns)
    if kind not in _BLOCK_BYTES:
        raise ValueError(f"no decoder for GGUF quantization {kind}; supported: {SUPPORTED_TYPES}")
    if columns % GROUP_SIZE:
        raise ValueError(f"a row of {columns} weights is not a whole number of {GROUP_SIZE}-groups")
    groups = columns // GROUP_SIZE
    blocks = np.ascontiguousarray(data).reshape(rows, groups, _BLOCK_BYTES[kind])
    scales = blocks[..., 0:2].copy().view(np.float16)[..., 0].astype(np.float32)
    mins = None
    if kind == "Q8_0":
        codes = blocks[..., 2:].copy().view(np.int8)
    else:
        start = 4 if kind == "Q4_1" else 2
        if kind == "Q4_1":
            mins = blocks[..., 2:4].copy().view(np.float16)[..., 0].astype(np.float32)
        packed = blocks[..., start:]
        # Byte j holds weight j in its low nibble and weight j + 16 in its high one.
        codes = np.concatenate([packed & 0x0F, packed >> 4], axis=-1).astype(np.int8)
        if kind == "Q4_0":
            codes = codes - np.int8(8)
    return GroupQuantized(
        kind,
        torch.from_numpy(codes.reshape(rows, columns)),
        torch.from_numpy(scales),
        None if mins is None else torch.from_numpy(mins),
    )
