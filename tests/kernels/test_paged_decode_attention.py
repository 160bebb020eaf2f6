"""paged_decode_attention: the reference against dense attention over each sequence's cached
tokens, the Triton launcher against the reference, on ragged batches and odd lengths."""

import importlib

import pytest
import torch

import kernels

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
NUM_Q_HEADS, NUM_KV_HEADS, HEAD_DIM = 9, 3, 64
SCALE = HEAD_DIM**-0.5

# Ragged batches: lengths 1, 7 and 33 against block sizes that do not divide them, and
# contexts long enough for the launcher to split them across programs.
CONTEXT_CASES = [[1], [7], [33], [33, 1, 7, 20, 16], [300], [300, 7, 129]]
# Llama-3-8B's head dim and query group of 4, on fewer heads: fp32 takes a smaller token
# tile there (decode_tokens_per_tile), which the cases above at D=64 do not reach.
WIDE_HEADS = (8, 2, 128)


def make_queries(batch, dtype, seed=1, num_q_heads=NUM_Q_HEADS, head_dim=HEAD_DIM):
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(batch, num_q_heads, head_dim, generator=generator).to(dtype).to(DEVICE)


@pytest.mark.parametrize("context_lens", CONTEXT_CASES)
def test_reference_matches_dense_attention(
    context_lens, make_paged_batch, naive_attention, assert_close
):
    paged = make_paged_batch(
        context_lens,
        block_size=16,
        num_kv_heads=NUM_KV_HEADS,
        head_dim=HEAD_DIM,
        dtype=torch.float32,
    )
    q = make_queries(len(context_lens), torch.float32)
    actual = kernels.paged_decode_attention_ref(
        q, paged.k_cache, paged.v_cache, paged.block_tables, paged.context_lens, SCALE
    )
    for seq, length in enumerate(context_lens):
        keys, values = paged.dense(seq)
        last_position = torch.tensor([length - 1])
        expected = naive_attention(q[seq : seq + 1], keys, values, last_position, SCALE)
        assert_close(actual[seq : seq + 1], expected, torch.float32, label=f"sequence {seq}")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("context_lens", CONTEXT_CASES)
@pytest.mark.parametrize("block_size", [16, 12])
def test_triton_matches_reference(
    dtype, context_lens, block_size, triton_ops, make_paged_batch, assert_close
):
    paged = make_paged_batch(
        context_lens,
        block_size=block_size,
        num_kv_heads=NUM_KV_HEADS,
        head_dim=HEAD_DIM,
        dtype=dtype,
    )
    q = make_queries(len(context_lens), dtype)
    arguments = (q, paged.k_cache, paged.v_cache, paged.block_tables, paged.context_lens, SCALE)
    assert_close(
        triton_ops.paged_decode_attention(*arguments),
        kernels.paged_decode_attention_ref(*arguments),
        dtype,
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("context_lens", [[33, 7], [300]])  # one program, then split
def test_triton_matches_reference_at_head_dim_128(
    dtype, context_lens, triton_ops, make_paged_batch, assert_close
):
    num_q_heads, num_kv_heads, head_dim = WIDE_HEADS
    paged = make_paged_batch(
        context_lens, block_size=16, num_kv_heads=num_kv_heads, head_dim=head_dim, dtype=dtype
    )
    q = make_queries(len(context_lens), dtype, num_q_heads=num_q_heads, head_dim=head_dim)
    arguments = (
        q, paged.k_cache, paged.v_cache, paged.block_tables, paged.context_lens, head_dim**-0.5
    )
    assert_close(
        triton_ops.paged_decode_attention(*arguments),
        kernels.paged_decode_attention_ref(*arguments),
        dtype,
    )


def test_long_contexts_are_split_across_programs():
    splits_module = importlib.import_module("kernels.context_splits")
    splits, tokens_per_split = splits_module.plan_context_splits(
        batch=1,
        num_kv_heads=NUM_KV_HEADS,
        context_capacity=320,
        tile=64,
        device=torch.device("cpu"),
    )
    assert splits > 1
    assert splits * tokens_per_split >= 320
    assert tokens_per_split % 64 == 0


def test_empty_context_gives_zeros(triton_ops, make_paged_batch):
    paged = make_paged_batch(
        [5, 0], block_size=16, num_kv_heads=NUM_KV_HEADS, head_dim=HEAD_DIM, dtype=torch.float32
    )
    q = make_queries(2, torch.float32)
    arguments = (q, paged.k_cache, paged.v_cache, paged.block_tables, paged.context_lens, SCALE)
    for attend in (kernels.paged_decode_attention_ref, triton_ops.paged_decode_attention):
        out = attend(*arguments)
        assert torch.isfinite(out).all()
        assert torch.equal(out[1], torch.zeros_like(out[1]))


def test_triton_reads_strided_queries(triton_ops, make_paged_batch, assert_close):
    paged = make_paged_batch(
        [9, 30], block_size=16, num_kv_heads=NUM_KV_HEADS, head_dim=HEAD_DIM, dtype=torch.float32
    )
    qkv = torch.randn(2, (NUM_Q_HEADS + 2 * NUM_KV_HEADS) * HEAD_DIM, device=DEVICE)
    q = qkv[:, : NUM_Q_HEADS * HEAD_DIM].view(2, NUM_Q_HEADS, HEAD_DIM)
    arguments = (q, paged.k_cache, paged.v_cache, paged.block_tables, paged.context_lens, SCALE)
    assert_close(
        triton_ops.paged_decode_attention(*arguments),
        kernels.paged_decode_attention_ref(*arguments),
    )


def test_launcher_rejects_bad_inputs(make_paged_batch):
    paged = make_paged_batch(
        [5, 9], block_size=16, num_kv_heads=NUM_KV_HEADS, head_dim=HEAD_DIM, dtype=torch.float32
    )
    q = make_queries(2, torch.float32)
    tables, lens = paged.block_tables, paged.context_lens
    with pytest.raises(ValueError, match="multiple of KV heads"):
        kernels.paged_decode_attention(q[:, :8], paged.k_cache, paged.v_cache, tables, lens, SCALE)
    with pytest.raises(ValueError, match="block_tables must have 2 rows"):
        kernels.paged_decode_attention(q, paged.k_cache, paged.v_cache, tables[:1], lens, SCALE)
    with pytest.raises(ValueError, match="context_lens must have dtype"):
        kernels.paged_decode_attention(q, paged.k_cache, paged.v_cache, tables, lens.long(), SCALE)
    with pytest.raises(ValueError, match="block_tables must have dtype"):
        kernels.paged_decode_attention(q, paged.k_cache, paged.v_cache, tables.long(), lens, SCALE)
    with pytest.raises(ValueError, match="k_cache must have dtype"):
        kernels.paged_decode_attention(
            q, paged.k_cache.bfloat16(), paged.v_cache, tables, lens, SCALE
        )
    with pytest.raises(ValueError, match="cache head dim"):
        kernels.paged_decode_attention(
            q[..., :32].contiguous(), paged.k_cache, paged.v_cache, tables, lens, SCALE
        )


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("batch", [32, 1])  # one long sequence takes the split-context path
def test_triton_full_size(dtype, batch, triton_ops, make_paged_batch, assert_close):
    generator = torch.Generator().manual_seed(3)
    if batch == 1:
        context_lens = [8000]
    else:
        context_lens = torch.randint(1, 2049, (batch,), generator=generator).tolist()
    paged = make_paged_batch(
        context_lens, block_size=16, num_kv_heads=NUM_KV_HEADS, head_dim=HEAD_DIM, dtype=dtype
    )
    q = make_queries(batch, dtype)
    arguments = (q, paged.k_cache, paged.v_cache, paged.block_tables, paged.context_lens, SCALE)
    assert_close(
        triton_ops.paged_decode_attention(*arguments),
        kernels.paged_decode_attention_ref(*arguments),
        dtype,
    )
