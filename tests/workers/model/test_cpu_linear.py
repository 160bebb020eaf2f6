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


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_row_gives_the_same_bits_alone_and_in_any_batch(dtype: torch.dtype) -> None:
    """What a sequence generates must not depend on what else is in its batch; oneDNN
    would take another kernel for a lone row (seen on the down projection's shape)."""
    if not prepacking_available(torch.device("cpu"), dtype):
        pytest.skip(f"no prepacked {dtype} on this CPU")
    torch.manual_seed(0)
    packed = PrepackedLinear(torch.randn(576, 1536).to(dtype), None, batch_hint=32)
    x = torch.randn(40, 1536).to(dtype)
    batch = packed(x)
    for rows in (1, 2, 3, 8, 33):
        assert torch.equal(packed(x[:rows]), batch[:rows]), rows
