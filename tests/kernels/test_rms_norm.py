"""rms_norm: the reference against a float64 formula, the Triton launcher against the reference."""

import pytest
import torch

import kernels

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
EPS = 1e-6


def naive_rms_norm(x, weight, eps):
    x64 = x.double()
    return x64 / torch.sqrt((x64 * x64).mean(-1, keepdim=True) + eps) * weight.double()


@pytest.mark.parametrize("num_tokens", [1, 7, 33])
def test_reference_matches_formula(num_tokens, assert_close):
    x = torch.randn(num_tokens, 96)
    weight = torch.randn(96)
    residual = torch.randn(num_tokens, 96)
    assert_close(
        kernels.rms_norm_ref(x, weight, EPS), naive_rms_norm(x, weight, EPS), torch.float32
    )
    out, summed = kernels.rms_norm_ref(x, weight, EPS, residual)
    assert_close(summed, x + residual, torch.float32)
    assert_close(out, naive_rms_norm(x + residual, weight, EPS), torch.float32)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("num_tokens", [1, 7, 33])
@pytest.mark.parametrize("with_residual", [False, True])
def test_triton_matches_reference(dtype, num_tokens, with_residual, triton_ops, assert_close):
    hidden_size = 96  # not a power of two, so the column mask matters
    x = torch.randn(num_tokens, hidden_size, device=DEVICE).to(dtype)
    weight = torch.randn(hidden_size, device=DEVICE).to(dtype)
    residual = (
        torch.randn(num_tokens, hidden_size, device=DEVICE).to(dtype) if with_residual else None
    )
    expected = kernels.rms_norm_ref(x, weight, EPS, residual)
    actual = triton_ops.rms_norm(x, weight, EPS, residual)
    if with_residual:
        assert_close(actual[0], expected[0], dtype, label="out")
        assert_close(actual[1], expected[1], dtype, label="residual")
    else:
        assert_close(actual, expected, dtype)


@pytest.mark.parametrize("num_tokens", [1, 7])
def test_fp32_residual_under_bf16_activations(num_tokens, triton_ops, assert_close):
    """The model keeps its residual stream in fp32: the sum stays fp32, the output is bf16."""
    x = torch.randn(num_tokens, 96, device=DEVICE).bfloat16()
    weight = torch.randn(96, device=DEVICE).bfloat16()
    residual = torch.randn(num_tokens, 96, device=DEVICE) * 100
    for norm in (kernels.rms_norm_ref, triton_ops.rms_norm):
        out, summed = norm(x, weight, EPS, residual)
        assert (out.dtype, summed.dtype) == (torch.bfloat16, torch.float32)
        # The fp32 sum keeps what a bf16 one would round away.
        assert torch.equal(summed, x.float() + residual)
        assert_close(out, naive_rms_norm(x.float() + residual, weight, EPS), torch.bfloat16)


def test_triton_reads_strided_rows(triton_ops, assert_close):
    wide = torch.randn(7, 160, device=DEVICE)
    x = wide[:, :96]  # row stride 160, as when normalizing a slice of a wider activation
    weight = torch.randn(96, device=DEVICE)
    assert_close(triton_ops.rms_norm(x, weight, EPS), kernels.rms_norm_ref(x, weight, EPS))


@pytest.mark.parametrize(
    "x_shape, weight_shape, residual_shape, message",
    [
        ((4, 8, 2), (8,), None, "x must have 2 dims"),
        ((4, 8), (7,), None, "weight must have shape"),
        ((4, 8), (8,), (3, 8), "residual must have shape"),
    ],
)
def test_launcher_rejects_bad_shapes(x_shape, weight_shape, residual_shape, message):
    x = torch.randn(x_shape, device=DEVICE)
    weight = torch.randn(weight_shape, device=DEVICE)
    residual = torch.randn(residual_shape, device=DEVICE) if residual_shape else None
    with pytest.raises(ValueError, match=message):
        kernels.rms_norm(x, weight, EPS, residual)


def test_launcher_rejects_bad_dtypes():
    with pytest.raises(ValueError, match="x must have dtype"):
        kernels.rms_norm(torch.ones(2, 8, dtype=torch.int32, device=DEVICE), torch.ones(8), EPS)
    x = torch.randn(2, 8, device=DEVICE)
    with pytest.raises(ValueError, match="residual must have dtype"):
        kernels.rms_norm(x, torch.ones(8, device=DEVICE), EPS, x.to(torch.bfloat16))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_triton_full_size(dtype, triton_ops, assert_close):
    x = torch.randn(4096, 576, device="cuda", dtype=dtype)
    weight = torch.randn(576, device="cuda", dtype=dtype)
    residual = torch.randn_like(x)
    actual = triton_ops.rms_norm(x, weight, EPS, residual)
    expected = kernels.rms_norm_ref(x, weight, EPS, residual)
    assert_close(actual[0], expected[0], dtype)
    assert_close(actual[1], expected[1], dtype)
