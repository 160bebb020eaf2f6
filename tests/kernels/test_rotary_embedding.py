"""rotary_embedding: the reference against a complex-number rotation, the Triton launcher
against the reference, including q and k as strided slices of a fused qkv projection."""

import pytest
import torch

import kernels

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
NUM_Q_HEADS, NUM_KV_HEADS, HEAD_DIM = 9, 3, 64


def make_cos_sin_cache(max_positions, head_dim, base=10000.0):
    inverse_frequency = 1.0 / base ** (torch.arange(0, head_dim, 2).double() / head_dim)
    angles = torch.arange(max_positions).double()[:, None] * inverse_frequency[None, :]
    return torch.cat((angles.cos(), angles.sin()), dim=-1).float()


def naive_rotate(x, positions, cos_sin_cache):
    """Neox rotation as complex multiplication: pair (i, i + D/2) is one complex number."""
    half_dim = x.shape[-1] // 2
    pairs = torch.complex(x[..., :half_dim].double(), x[..., half_dim:].double())
    cos_sin = cos_sin_cache[positions].double()
    rotation = torch.complex(cos_sin[:, :half_dim], cos_sin[:, half_dim:])[:, None, :]
    rotated = pairs * rotation
    return torch.cat((rotated.real, rotated.imag), dim=-1)


def make_qkv_views(num_tokens, dtype):
    """q and k as views into one [T, (Hq + 2 Hk) D] projection output, as the model has them."""
    qkv = torch.randn(num_tokens, (NUM_Q_HEADS + 2 * NUM_KV_HEADS) * HEAD_DIM, device=DEVICE)
    qkv = qkv.to(dtype)
    q = qkv[:, : NUM_Q_HEADS * HEAD_DIM].view(num_tokens, NUM_Q_HEADS, HEAD_DIM)
    k = qkv[:, NUM_Q_HEADS * HEAD_DIM : (NUM_Q_HEADS + NUM_KV_HEADS) * HEAD_DIM]
    return q, k.view(num_tokens, NUM_KV_HEADS, HEAD_DIM)


@pytest.mark.parametrize("num_tokens", [1, 7, 33])
def test_reference_matches_complex_rotation(num_tokens, assert_close):
    cos_sin_cache = make_cos_sin_cache(4096, HEAD_DIM).to(DEVICE)
    positions = torch.randint(0, 4096, (num_tokens,), device=DEVICE)
    q, k = make_qkv_views(num_tokens, torch.float32)
    expected_q, expected_k = (
        naive_rotate(q, positions, cos_sin_cache),
        naive_rotate(k, positions, cos_sin_cache),
    )
    kernels.rotary_embedding_ref(q, k, positions, cos_sin_cache)
    assert_close(q, expected_q, torch.float32, label="q")
    assert_close(k, expected_k, torch.float32, label="k")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("num_tokens", [1, 7, 33])
def test_triton_matches_reference(dtype, num_tokens, triton_ops, assert_close):
    cos_sin_cache = make_cos_sin_cache(2048, HEAD_DIM).to(DEVICE)
    positions = torch.randint(0, 2048, (num_tokens,), device=DEVICE)
    q, k = make_qkv_views(num_tokens, dtype)
    expected_q, expected_k = q.clone(), k.clone()
    kernels.rotary_embedding_ref(expected_q, expected_k, positions, cos_sin_cache)
    untouched = q.clone()
    assert triton_ops.rotary_embedding(q, k, positions, cos_sin_cache) is None
    assert_close(q, expected_q, dtype, label="q")
    assert_close(k, expected_k, dtype, label="k")
    if num_tokens > 1:
        assert not torch.equal(q, untouched), "q was not rotated in place"


def test_launcher_rejects_bad_inputs():
    q = torch.randn(5, NUM_Q_HEADS, HEAD_DIM, device=DEVICE)
    k = torch.randn(5, NUM_KV_HEADS, HEAD_DIM, device=DEVICE)
    positions = torch.arange(5, device=DEVICE)
    cache = make_cos_sin_cache(16, HEAD_DIM).to(DEVICE)
    with pytest.raises(ValueError, match="k must be"):
        kernels.rotary_embedding(q, k[:4], positions, cache)
    with pytest.raises(ValueError, match="positions must have dtype"):
        kernels.rotary_embedding(q, k, positions.int(), cache)
    with pytest.raises(ValueError, match="positions must have shape"):
        kernels.rotary_embedding(q, k, positions[:3], cache)
    with pytest.raises(ValueError, match="cos_sin_cache must be"):
        kernels.rotary_embedding(q, k, positions, cache[:, :32])
    with pytest.raises(ValueError, match="k must have dtype"):
        kernels.rotary_embedding(q, k.to(torch.bfloat16), positions, cache)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_triton_full_size(dtype, triton_ops, assert_close):
    cos_sin_cache = make_cos_sin_cache(8192, HEAD_DIM).cuda()
    positions = torch.randint(0, 8192, (4096,), device="cuda")
    q, k = make_qkv_views(4096, dtype)
    expected_q, expected_k = q.clone(), k.clone()
    kernels.rotary_embedding_ref(expected_q, expected_k, positions, cos_sin_cache)
    triton_ops.rotary_embedding(q, k, positions, cos_sin_cache)
    assert_close(q, expected_q, dtype, label="q")
    assert_close(k, expected_k, dtype, label="k")
