"""prefill_attention: the reference against dense causal attention per sequence (with and
without a cached prefix), the Triton launcher against the reference on ragged packed batches."""

import pytest
import torch

import kernels

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
NUM_Q_HEADS, NUM_KV_HEADS, HEAD_DIM = 9, 3, 64
SCALE = HEAD_DIM**-0.5
# Llama-3-8B's head dim and query group of 4, on fewer heads: the launcher picks smaller
# tiles there (prefill_tiles), which the cases above at D=64 do not reach.
WIDE_HEADS = (8, 2, 128)

# Each case is a batch of (new query tokens, total context length) pairs: fresh prompts,
# prompts continuing a cached prefix, one-token chunks, and a sequence with no new tokens.
SEQUENCE_CASES = [
    [(1, 1)],
    [(7, 7)],
    [(33, 33)],
    [(7, 40), (1, 33), (33, 33), (0, 10), (5, 17)],
]


def make_prefill(sequences, dtype, block_size, make_paged_batch, seed=2, heads=None):
    num_q_heads, num_kv_heads, head_dim = heads or (NUM_Q_HEADS, NUM_KV_HEADS, HEAD_DIM)
    paged = make_paged_batch(
        [total for _, total in sequences],
        block_size=block_size,
        num_kv_heads=num_kv_heads,
        head_dim=head_dim,
        dtype=dtype,
    )
    query_lens = torch.tensor([new for new, _ in sequences])
    cu_seqlens_q = torch.zeros(len(sequences) + 1, dtype=torch.int32)
    cu_seqlens_q[1:] = query_lens.cumsum(0)
    generator = torch.Generator().manual_seed(seed)
    q = torch.randn(int(cu_seqlens_q[-1]), num_q_heads, head_dim, generator=generator)
    return paged, q.to(dtype).to(DEVICE), cu_seqlens_q.to(DEVICE)


@pytest.mark.parametrize("sequences", SEQUENCE_CASES)
def test_reference_matches_dense_causal_attention(
    sequences, make_paged_batch, naive_attention, assert_close
):
    paged, q, cu_seqlens_q = make_prefill(sequences, torch.float32, 16, make_paged_batch)
    actual = kernels.prefill_attention_ref(
        q, paged.k_cache, paged.v_cache, paged.block_tables, cu_seqlens_q, paged.context_lens, SCALE
    )
    for seq, (new_tokens, total) in enumerate(sequences):
        if new_tokens == 0:
            continue
        start = int(cu_seqlens_q[seq])
        keys, values = paged.dense(seq)
        positions = torch.arange(total - new_tokens, total)
        expected = naive_attention(q[start : start + new_tokens], keys, values, positions, SCALE)
        assert_close(
            actual[start : start + new_tokens], expected, torch.float32, label=f"sequence {seq}"
        )


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("sequences", SEQUENCE_CASES)
@pytest.mark.parametrize("block_size", [16, 12])
def test_triton_matches_reference(
    dtype, sequences, block_size, triton_ops, make_paged_batch, assert_close
):
    paged, q, cu_seqlens_q = make_prefill(sequences, dtype, block_size, make_paged_batch)
    arguments = (
        q,
        paged.k_cache,
        paged.v_cache,
        paged.block_tables,
        cu_seqlens_q,
        paged.context_lens,
        SCALE,
    )
    assert_close(
        triton_ops.prefill_attention(*arguments), kernels.prefill_attention_ref(*arguments), dtype
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_triton_matches_reference_at_head_dim_128(
    dtype, triton_ops, make_paged_batch, assert_close
):
    # Queries spanning several query tiles and keys several token tiles, after a prefix.
    sequences = [(7, 40), (37, 37)]
    paged, q, cu_seqlens_q = make_prefill(sequences, dtype, 16, make_paged_batch, heads=WIDE_HEADS)
    scale = WIDE_HEADS[2] ** -0.5
    arguments = (
        q, paged.k_cache, paged.v_cache, paged.block_tables, cu_seqlens_q, paged.context_lens, scale
    )
    assert_close(
        triton_ops.prefill_attention(*arguments), kernels.prefill_attention_ref(*arguments), dtype
    )


def test_triton_reads_strided_queries(triton_ops, make_paged_batch, assert_close):
    paged, _, cu_seqlens_q = make_prefill([(7, 12), (9, 9)], torch.float32, 16, make_paged_batch)
    qkv = torch.randn(16, (NUM_Q_HEADS + 2 * NUM_KV_HEADS) * HEAD_DIM, device=DEVICE)
    q = qkv[:, : NUM_Q_HEADS * HEAD_DIM].view(16, NUM_Q_HEADS, HEAD_DIM)
    arguments = (
        q,
        paged.k_cache,
        paged.v_cache,
        paged.block_tables,
        cu_seqlens_q,
        paged.context_lens,
        SCALE,
    )
    assert_close(
        triton_ops.prefill_attention(*arguments), kernels.prefill_attention_ref(*arguments)
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_reference_gives_each_query_the_bits_of_a_decode_step(dtype, make_paged_batch):
    """The CPU path's prefill is decode, one query per position: every query row equals,
    bit for bit, a decode step at its position, and a decode step batched beside a longer
    sequence; so one-piece prefill, a prefill after a cached prefix and token-by-token
    decode build the same KV cache (what exact resume after a dead worker rests on)."""
    sequences = [(40, 40), (9, 57), (1, 17)]
    paged, q, cu_seqlens_q = make_prefill(sequences, dtype, 16, make_paged_batch)
    args = (paged.k_cache, paged.v_cache)
    prefilled = kernels.prefill_attention_ref(
        q, *args, paged.block_tables, cu_seqlens_q, paged.context_lens, SCALE
    )
    worst = []
    for seq, (new_tokens, total) in enumerate(sequences):
        start = int(cu_seqlens_q[seq])
        for offset in range(new_tokens):
            row = start + offset
            position = total - new_tokens + offset
            alone = kernels.paged_decode_attention_ref(
                q[row : row + 1], *args, paged.block_tables[seq : seq + 1],
                torch.tensor([position + 1], dtype=torch.int32, device=DEVICE), SCALE,
            )
            # Beside another sequence (often a longer one: a wider padded gather).
            other = (seq + 1) % len(sequences)
            other_context = sequences[other][1]
            batched = kernels.paged_decode_attention_ref(
                torch.cat([q[row : row + 1], q[:1]]), *args,
                paged.block_tables[[seq, other]],
                torch.tensor([position + 1, other_context], dtype=torch.int32, device=DEVICE), SCALE,
            )[:1]
            for label, decoded in (("alone", alone), ("batched", batched)):
                if not torch.equal(prefilled[row : row + 1], decoded):
                    difference = (prefilled[row : row + 1].float() - decoded.float()).abs().max()
                    worst.append((seq, position, label, float(difference)))
    assert not worst, f"rows that differ from decode: {worst[:5]}"


def test_reference_rejects_context_shorter_than_queries(make_paged_batch):
    paged, q, cu_seqlens_q = make_prefill([(7, 7)], torch.float32, 16, make_paged_batch)
    too_short = torch.tensor([5], dtype=torch.int32, device=DEVICE)
    with pytest.raises(ValueError, match="shorter than"):
        kernels.prefill_attention_ref(
            q, paged.k_cache, paged.v_cache, paged.block_tables, cu_seqlens_q, too_short, SCALE
        )


def test_launcher_rejects_bad_inputs(make_paged_batch):
    paged, q, cu = make_prefill([(3, 5), (2, 2)], torch.float32, 16, make_paged_batch)
    caches, tables, lens = (paged.k_cache, paged.v_cache), paged.block_tables, paged.context_lens
    with pytest.raises(ValueError, match="cu_seqlens_q must have shape"):
        kernels.prefill_attention(q, *caches, tables, cu[:2], lens, SCALE)
    with pytest.raises(ValueError, match="cu_seqlens_q must have dtype"):
        kernels.prefill_attention(q, *caches, tables, cu.long(), lens, SCALE)
    with pytest.raises(ValueError, match="context_lens must have shape"):
        kernels.prefill_attention(q, *caches, tables, cu, lens[:1], SCALE)
    with pytest.raises(ValueError, match="multiple of KV heads"):
        kernels.prefill_attention(q[:, :4], *caches, tables, cu, lens, SCALE)
    with pytest.raises(ValueError, match="q must have 3 dims"):
        kernels.prefill_attention(q[0], *caches, tables, cu, lens, SCALE)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_triton_full_size(dtype, triton_ops, make_paged_batch, assert_close):
    generator = torch.Generator().manual_seed(4)
    new_tokens = torch.randint(1, 513, (8,), generator=generator)
    prefixes = torch.randint(0, 1025, (8,), generator=generator)
    sequences = [(int(n), int(n + p)) for n, p in zip(new_tokens, prefixes, strict=True)]
    paged, q, cu_seqlens_q = make_prefill(sequences, dtype, 16, make_paged_batch)
    arguments = (
        q,
        paged.k_cache,
        paged.v_cache,
        paged.block_tables,
        cu_seqlens_q,
        paged.context_lens,
        SCALE,
    )
    assert_close(
        triton_ops.prefill_attention(*arguments), kernels.prefill_attention_ref(*arguments), dtype
    )
