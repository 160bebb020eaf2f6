"""silu_and_mul: the reference against a float64 formula, the Triton launcher against the reference."""

import pytest
import torch

import kernels

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


@pytest.mark.parametrize("num_tokens", [1, 7, 33])
def test_reference_matches_formula(num_tokens, assert_close):
    x = torch.randn(num_tokens, 2 * 80)
    gate, up = x[:, :80].double(), x[:, 80:].double()
    expected = gate / (1 + torch.exp(-gate)) * up
    assert_close(kernels.silu_and_mul_ref(x), expected, torch.float32)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("num_tokens", [1, 7, 33])
@pytest.mark.parametrize("intermediate_size", [80, 1100])  # 1100 spans two column tiles
def test_triton_matches_reference(dtype, num_tokens, intermediate_size, triton_ops, assert_close):
    x = (torch.randn(num_tokens, 2 * intermediate_size, device=DEVICE) * 3).to(dtype)
    assert_close(triton_ops.silu_and_mul(x), kernels.silu_and_mul_ref(x), dtype)


def test_triton_reads_strided_rows(triton_ops, assert_close):
    x = torch.randn(7, 200, device=DEVICE)[:, :160]
    assert_close(triton_ops.silu_and_mul(x), kernels.silu_and_mul_ref(x))


def test_triton_handles_zero_tokens(triton_ops):
    out = triton_ops.silu_and_mul(torch.randn(0, 160, device=DEVICE))
    assert out.shape == (0, 80)


def test_launcher_rejects_bad_inputs():
    with pytest.raises(ValueError, match="must be even"):
        kernels.silu_and_mul(torch.randn(3, 7, device=DEVICE))
    with pytest.raises(ValueError, match="x must have 2 dims"):
        kernels.silu_and_mul(torch.randn(3, 8, device=DEVICE).flatten())
    with pytest.raises(ValueError, match="x must have dtype"):
        kernels.silu_and_mul(torch.ones(3, 8, dtype=torch.int64, device=DEVICE))
    with pytest.raises(ValueError, match="contiguous in its last dim"):
        kernels.silu_and_mul(torch.randn(8, 3, device=DEVICE).t())


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_triton_full_size(dtype, triton_ops, assert_close):
    x = torch.randn(4096, 2 * 1536, device="cuda", dtype=dtype)
    assert_close(triton_ops.silu_and_mul(x), kernels.silu_and_mul_ref(x), dtype)
