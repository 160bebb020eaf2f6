"""KQuantized: a weight in llama.cpp's K-quants (Q4_K, Q5_K, Q6_K), the quantizations of
the files people download (Q4_K_M, Q5_K_M, Q6_K), kept as the file's own bytes.

Each row is a run of 256-weight super-blocks that carry their scales inside them, so the
resident weight is exactly the file's tensor data; the fused CPU op decodes the blocks in
registers (kernels/cpu/super_blocks.h) to the float32 weights gguf-py's dequantize gives.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import gguf
import numpy as np
import torch

SUPER_BLOCK = 256
# Bytes of one super-block of 256 weights (gguf's GGML_QUANT_SIZES).
BLOCK_BYTES = {"Q4_K": 144, "Q5_K": 176, "Q6_K": 210}
K_QUANT_TYPES = tuple(BLOCK_BYTES)
_BITS = {"Q4_K": 4, "Q5_K": 5, "Q6_K": 6}
# Q6_K stores a code q in -32..31 as q + 32; Q4_K and Q5_K codes are 0.. with a min.
_OFFSETS = {"Q4_K": 0, "Q5_K": 0, "Q6_K": 32}


@dataclass(frozen=True, slots=True)
class KQuantized:
    """weight[n] = dequantize(blocks[n]): a row of `columns` weights in super-blocks.

    Rows are independent (a super-block never crosses one), so row operations (fusing
    q/k/v, undoing llama.cpp's rope permutation) act on `blocks` rows as they are.
    """

    kind: str
    blocks: torch.Tensor  # [N, K / 256 * block bytes] uint8
    columns: int

    @property
    def bits(self) -> int:
        return _BITS[self.kind]

    @property
    def offset(self) -> int:
        return _OFFSETS[self.kind]

    @property
    def shape(self) -> tuple[int, int]:
        return int(self.blocks.shape[0]), self.columns

    def map_rows(self, fn: Callable[[torch.Tensor], torch.Tensor]) -> KQuantized:
        """Apply a row-wise function (a permutation or selection of rows) to the blocks."""
        return KQuantized(self.kind, fn(self.blocks), self.columns)

    def dequantize(self) -> torch.Tensor:
        """The float32 weight, by gguf-py's own dequantize: what the fused op must meet."""
        values = gguf.quants.dequantize(
            self.blocks.numpy(), gguf.GGMLQuantizationType[self.kind]
        )
        return torch.from_numpy(np.ascontiguousarray(values, dtype=np.float32))


def decode_k_blocks(kind: str, data: np.ndarray, rows: int, columns: int) -> KQuantized:
    """GGUF K-quant bytes ([rows, bytes per row] uint8) as a KQuantized weight (a copy, so
    the file's memory map can close)."""
    if kind not in BLOCK_BYTES:
        raise ValueError(f"{kind} is not a K-quant; K-quants: {K_QUANT_TYPES}")
    if columns % SUPER_BLOCK:
        raise ValueError(f"a row of {columns} weights is not a whole number of {SUPER_BLOCK}-blocks")
    row_bytes = columns // SUPER_BLOCK * BLOCK_BYTES[kind]
    blocks = np.array(data, dtype=np.uint8, copy=True).reshape(rows, row_bytes)
    return KQuantized(kind, torch.from_numpy(blocks), columns)


def concat_k_rows(parts: list[KQuantized]) -> KQuantized:
    """Stack K-quant weights of one kind along the rows, as q/k/v and gate/up are fused."""
    if len({(part.kind, part.columns) for part in parts}) != 1:
        raise ValueError("only weights of one K-quant and width stack into one")
    return KQuantized(parts[0].kind, torch.cat([part.blocks for part in parts]), parts[0].columns)
