"""RowStack: a fused projection whose parts the file stores in different quantizations.

llama.cpp's mixed recipes do this: a Q4_K_M file keeps q and k in Q4_K and, in some
layers, v in Q6_K, yet the model computes q/k/v as one `qkv_proj`. No one op reads two
formats, so each part keeps its own and `StackedLinear` computes them one after another,
their outputs side by side: the rows the fused weight would give, with the same bits
(each output row is its own sum whatever rows share the call).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import nn

if TYPE_CHECKING:
    from workers.model.group_quantized import GroupQuantized
    from workers.model.k_quants import KQuantized


@dataclass(frozen=True, slots=True)
class RowStack:
    """Quantized weights of one width stacked along the rows, each in its own format."""

    parts: tuple[GroupQuantized | KQuantized, ...]

    @property
    def kind(self) -> str:
        """Its parts' quantizations, joined by "+" ("Q4_K+Q6_K")."""
        return "+".join(dict.fromkeys(part.kind for part in self.parts))

    @property
    def shape(self) -> tuple[int, int]:
        return sum(part.shape[0] for part in self.parts), self.parts[0].shape[1]

    def dequantize(self) -> torch.Tensor:
        return torch.cat([part.dequantize() for part in self.parts])


class StackedLinear(nn.Module):
    """Linears over consecutive row ranges of one weight: their outputs concatenated."""

    def __init__(self, parts: list[nn.Module], rows: list[int]) -> None:
        super().__init__()
        self.parts = nn.ModuleList(parts)
        self.out_features = sum(rows)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([part(x) for part in self.parts], dim=-1)
