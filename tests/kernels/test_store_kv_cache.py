"""store_kv_cache: the reference against a per-token loop, the Triton launcher against the reference."""

import pytest
import torch

import kernels

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
NUM_KV_HEADS, HEAD_DIM, BLOCK_SIZE, NUM_BLOCKS = 3, 64, 16, 6


def make_step(num_tokens, dtype, skipped=()):
    """k, v for a step and distinct random slots, with the tokens in `skipped` marked -1."""
    k = torch.randn(num_tokens, NUM_KV_HEADS, HEAD_DIM, device=DEVICE).to(dtype)
    v = torch.randn(num_tokens, NUM_KV_HEADS, HEAD_DIM, device=DEVICE).to(dtype)
    slots = torch.randperm(NUM_BLOCKS * BLOCK_SIZE)[:num_tokens].to(DEVICE)
    for token in skipped:
        slots[token] = -1
    return k, v, slots


def empty_caches(dtype):
    shape = (NUM_BLOCKS, BLOCK_SIZE, NUM_KV_HEADS, HEAD_DIM)
    return torch.zeros(shape, device=DEVICE, dtype=dtype), torch.zeros(
        shape, device=DEVICE, dtype=dtype
    )


@pytest.mark.parametrize("num_tokens", [1, 7, 33])
def test_reference_matches_loop(num_tokens):
    k, v, slots = make_step(num_tokens, torch.float32, skipped=(0,) if num_tokens > 1 else ())
    k_cache, v_cache = empty_caches(torch.float32)
    expected_k, expected_v = empty_caches(torch.float32)
    for token, slot in enumerate(slots.tolist()):
        if slot >= 0:
            expected_k[slot // BLOCK_SIZE, slot % BLOCK_SIZE] = k[token]
            expected_v[slot // BLOCK_SIZE, slot % BLOCK_SIZE] = v[token]
    kernels.store_kv_cache_ref(k, v, k_cache, v_cache, slots)
    assert torch.equal(k_cache, expected_k)
    assert torch.equal(v_cache, expected_v)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("num_tokens", [1, 7, 33])
def test_triton_matches_reference(dtype, num_tokens, triton_ops):
    k, v, slots = make_step(num_tokens, dtype, skipped=(1, 4) if num_tokens > 4 else ())
    k_cache, v_cache = empty_caches(dtype)
    expected_k, expected_v = empty_caches(dtype)
    kernels.store_kv_cache_ref(k, v, expected_k, expected_v, slots)
    triton_ops.store_kv_cache(k, v, k_cache, v_cache, slots)
    # A copy is exact, and skipped slots must stay untouched (zero).
    assert torch.equal(k_cache, expected_k)
    assert torch.equal(v_cache, expected_v)


def test_triton_reads_strided_keys(triton_ops):
    kv = torch.randn(7, 2, NUM_KV_HEADS, HEAD_DIM, device=DEVICE)
    k, v = kv[:, 0], kv[:, 1]  # token stride 2 * Hk * D, as slices of a fused projection
    slots = torch.tensor([5, 17, -1, 40, 41, 0, 95], device=DEVICE)
    k_cache, v_cache = empty_caches(torch.float32)
    expected_k, expected_v = empty_caches(torch.float32)
    kernels.store_kv_cache_ref(k, v, expected_k, expected_v, slots)
    triton_ops.store_kv_cache(k, v, k_cache, v_cache, slots)
    assert torch.equal(k_cache, expected_k)
    assert torch.equal(v_cache, expected_v)


def test_launcher_rejects_bad_inputs():
    k, v, slots = make_step(4, torch.float32)
    k_cache, v_cache = empty_caches(torch.float32)
    with pytest.raises(ValueError, match="v must have shape"):
        kernels.store_kv_cache(k, v[:3], k_cache, v_cache, slots)
    with pytest.raises(ValueError, match="k_cache must be"):
        kernels.store_kv_cache(k, v, k_cache[..., :32], v_cache, slots)
    with pytest.raises(ValueError, match="slot_mapping must have dtype"):
        kernels.store_kv_cache(k, v, k_cache, v_cache, slots.int())
    with pytest.raises(ValueError, match="slot_mapping must have shape"):
        kernels.store_kv_cache(k, v, k_cache, v_cache, slots[:2])
    with pytest.raises(ValueError, match="k_cache must be contiguous"):
        kernels.store_kv_cache(k, v, k_cache.transpose(0, 1), v_cache.transpose(0, 1), slots)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_triton_full_size(dtype, triton_ops):
    num_blocks, block_size, num_tokens = 4096, 16, 8192
    shape = (num_blocks, block_size, NUM_KV_HEADS, HEAD_DIM)
    k = torch.randn(num_tokens, NUM_KV_HEADS, HEAD_DIM, device="cuda", dtype=dtype)
    v = torch.randn_like(k)
    slots = torch.randperm(num_blocks * block_size, device="cuda")[:num_tokens]
    slots[::7] = -1
    caches = [torch.zeros(shape, device="cuda", dtype=dtype) for _ in range(4)]
    kernels.store_kv_cache_ref(k, v, caches[0], caches[1], slots)
    triton_ops.store_kv_cache(k, v, caches[2], caches[3], slots)
    assert torch.equal(caches[0], caches[2])
    assert torch.equal(caches[1], caches[3])
