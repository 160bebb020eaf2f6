"""Prepacked oneDNN linears compute what nn.Linear computes, for any batch size."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from workers.model.cpu_linear import PrepackedLinear, prepack_linears, prepacking_available

pytestmark = pytest.mark.skipif(
    not prepacking_available(torch.device("cpu"), torch.float32), reason="no oneDNN on this CPU build"
)


@pytest.mark.parametrize("batch", [1, 7, 33])
@pytest.mark.parametrize("bias", [True, False])
def test_matches_nn_linear(batch: int, bias: bool) -> None:
    torch.manual_seed(batch)
    linear = nn.Linear(576, 192, bias=bias)
    packed = PrepackedLinear(linear.weight.detach(), linear.bias, batch_hint=32)
    x = torch.randn(batch, 576)
    worst = (packed(x) - linear(x)).abs().max().item()
    assert worst < 1e-4, f"worst mismatch {worst}"


def test_swaps_every_linear_and_keeps_the_output() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Sequential(nn.Linear(32, 8, bias=False)))
    x = torch.randn(3, 5, 16)
    expected = model(x)
    assert prepack_linears(model) == 2
    assert not any(isinstance(module, nn.Linear) for module in model.modules())
    assert (model(x) - expected).abs().max().item() < 1e-5
