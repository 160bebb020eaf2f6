"""Sliding-window attention (a query at p sees keys p - W < k <= p) in every backend: the
torch references against dense attention written out, the fused CPU ops and the Triton
kernels against the references, for windows shorter than, equal to and longer than the
context, across block boundaries and GQA groups, decode and prefill after a cached prefix;
a window covering the whole context gives the bits of no window, the table entries before
a window are never read, and the fused ops give a prefilled query a decode step's bits."""

from __future__ import annotations

import pytest
import torch

import kernels
from kernels import cpu_ops
from workers.model.attention import Attention

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
NUM_Q_HEADS, NUM_KV_HEADS, HEAD_DIM = 9, 3, 64
SCALE = 0.11  # not head_dim ** -0.5: the scale is the caller's
# Windows of one key, less than a block, a block, past a block, and longer than any context.
WINDOWS = [1, 5, 16, 17, 40, 1000]
DECODE_CONTEXTS = [1, 7, 16, 33, 48]
# (new tokens, context): fresh prompts, prompts after a cached prefix, a one-token chunk.
PREFILL_SEQUENCES = [(7, 40), (1, 33), (33, 33), (0, 10), (20, 50)]
# Llama-3-8B's head dim and query group of 4: the fused op's grouped path, Triton's fp32 tile.
WIDE_HEADS = (8, 2, 128)


def windowed_attention(query, keys, values, query_positions, scale, window):
    """Dense float64 attention: query [Lq, Hq, D] at query_positions over keys/values
    [Lk, Hk, D] at positions 0..Lk-1, each query seeing its window alone."""
    group = query.shape[1] // keys.shape[1]
    keys = keys.double().repeat_interleave(group, dim=1)
    values = values.double().repeat_interleave(group, dim=1)
    scores = torch.einsum("qhd,khd->hqk", query.double(), keys) * scale
    key_positions = torch.arange(keys.shape[0], device=query.device)[None, :]
    positions = query_positions.to(query.device)[:, None]
    visible = (key_positions <= positions) & (key_positions > positions - window)
    scores = scores.masked_fill(~visible[None], float("-inf"))
    return torch.einsum("hqk,khd->qhd", scores.softmax(dim=-1), values)


def decode_case(make_paged_batch, dtype, block_size=16, heads=None, contexts=DECODE_CONTEXTS):
    num_q_heads, num_kv_heads, head_dim = heads or (NUM_Q_HEADS, NUM_KV_HEADS, HEAD_DIM)
    paged = make_paged_batch(
        contexts, block_size=block_size, num_kv_heads=num_kv_heads, head_dim=head_dim, dtype=dtype
    )
    generator = torch.Generator().manual_seed(7)
    q = torch.randn(len(contexts), num_q_heads, head_dim, generator=generator)
    return paged, q.to(dtype).to(DEVICE)


def prefill_case(make_paged_batch, dtype, block_size=16, heads=None, sequences=PREFILL_SEQUENCES):
    num_q_heads, num_kv_heads, head_dim = heads or (NUM_Q_HEADS, NUM_KV_HEADS, HEAD_DIM)
    paged = make_paged_batch(
        [total for _, total in sequences], block_size=block_size, num_kv_heads=num_kv_heads,
        head_dim=head_dim, dtype=dtype,
    )
    cu_seqlens_q = torch.zeros(len(sequences) + 1, dtype=torch.int32)
    cu_seqlens_q[1:] = torch.tensor([new for new, _ in sequences]).cumsum(0)
    generator = torch.Generator().manual_seed(8)
    q = torch.randn(int(cu_seqlens_q[-1]), num_q_heads, head_dim, generator=generator)
    return paged, q.to(dtype).to(DEVICE), cu_seqlens_q.to(DEVICE)


def decode_args(paged, q):
    return (q, paged.k_cache, paged.v_cache, paged.block_tables, paged.context_lens)


def prefill_args(paged, q, cu_seqlens_q):
    return (q, paged.k_cache, paged.v_cache, paged.block_tables, cu_seqlens_q, paged.context_lens)


def fused_ops():
    if not cpu_ops.available():
        pytest.skip("the fused CPU ops did not build on this machine")
    return kernels.get_ops("cpu")


def backend_ops(backend):
    """The op set of `backend`, or a skip saying why this machine cannot run it."""
    if backend == "cpu":
        return fused_ops()
    try:
        return kernels.get_ops(backend)
    except ValueError as error:
        pytest.skip(str(error))


@pytest.mark.parametrize("window", WINDOWS)
@pytest.mark.parametrize("block_size", [16, 12])
def test_references_match_dense_windowed_attention(
    window, block_size, make_paged_batch, assert_close
):
    paged, q = decode_case(make_paged_batch, torch.float32, block_size)
    decoded = kernels.paged_decode_attention_ref(*decode_args(paged, q), SCALE, window)
    for seq, length in enumerate(DECODE_CONTEXTS):
        keys, values = paged.dense(seq)
        expected = windowed_attention(
            q[seq : seq + 1], keys, values, torch.tensor([length - 1]), SCALE, window
        )
        assert_close(decoded[seq : seq + 1], expected, torch.float32, label=f"decode {seq}")

    paged, q, cu = prefill_case(make_paged_batch, torch.float32, block_size)
    prefilled = kernels.prefill_attention_ref(*prefill_args(paged, q, cu), SCALE, window)
    for seq, (new_tokens, total) in enumerate(PREFILL_SEQUENCES):
        start = int(cu[seq])
        keys, values = paged.dense(seq)
        rows = slice(start, start + new_tokens)
        if new_tokens:
            positions = torch.arange(total - new_tokens, total)
            expected = windowed_attention(q[rows], keys, values, positions, SCALE, window)
            assert_close(prefilled[rows], expected, torch.float32, label=f"prefill {seq}")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("window", [5, 16, 40])
@pytest.mark.parametrize("heads", [None, WIDE_HEADS])
def test_fused_cpu_ops_match_the_references(dtype, window, heads, make_paged_batch, assert_close):
    ops = fused_ops()
    paged, q = decode_case(make_paged_batch, dtype, heads=heads)
    args = decode_args(paged, q)
    assert_close(
        ops.paged_decode_attention(*args, SCALE, sliding_window=window),
        kernels.paged_decode_attention_ref(*args, SCALE, sliding_window=window),
        dtype,
    )
    paged, q, cu = prefill_case(make_paged_batch, dtype, heads=heads)
    args = prefill_args(paged, q, cu)
    assert_close(
        ops.prefill_attention(*args, SCALE, sliding_window=window),
        kernels.prefill_attention_ref(*args, SCALE, sliding_window=window),
        dtype,
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("window", [1, 17, 40])
@pytest.mark.parametrize("block_size", [16, 12])
def test_triton_matches_the_references(
    dtype, window, block_size, triton_ops, make_paged_batch, assert_close
):
    paged, q = decode_case(make_paged_batch, dtype, block_size)
    args = decode_args(paged, q)
    assert_close(
        triton_ops.paged_decode_attention(*args, SCALE, sliding_window=window),
        kernels.paged_decode_attention_ref(*args, SCALE, sliding_window=window),
        dtype,
    )
    paged, q, cu = prefill_case(make_paged_batch, dtype, block_size)
    args = prefill_args(paged, q, cu)
    assert_close(
        triton_ops.prefill_attention(*args, SCALE, sliding_window=window),
        kernels.prefill_attention_ref(*args, SCALE, sliding_window=window),
        dtype,
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_triton_splits_a_long_context_within_its_window(
    dtype, triton_ops, make_paged_batch, assert_close
):
    """One long sequence: decode splits it across programs, which cover its window."""
    paged, q = decode_case(make_paged_batch, dtype, heads=WIDE_HEADS, contexts=[300])
    args = decode_args(paged, q)
    for window in (100, 257):
        assert_close(
            triton_ops.paged_decode_attention(*args, SCALE, sliding_window=window),
            kernels.paged_decode_attention_ref(*args, SCALE, sliding_window=window),
            dtype,
        )


@pytest.mark.parametrize("backend", ["torch", "cpu", "triton"])
def test_a_window_covering_the_context_gives_the_bits_of_none(backend, make_paged_batch):
    ops = backend_ops(backend)
    paged, q = decode_case(make_paged_batch, torch.float32)
    args = decode_args(paged, q)
    full = ops.paged_decode_attention(*args, SCALE)
    for window in (max(DECODE_CONTEXTS), 10_000):
        assert torch.equal(ops.paged_decode_attention(*args, SCALE, sliding_window=window), full)
    paged, q, cu = prefill_case(make_paged_batch, torch.float32)
    args = prefill_args(paged, q, cu)
    full = ops.prefill_attention(*args, SCALE)
    longest = max(total for _, total in PREFILL_SEQUENCES)
    for window in (longest, 10_000):
        assert torch.equal(ops.prefill_attention(*args, SCALE, sliding_window=window), full)


@pytest.mark.parametrize("backend", ["torch", "cpu", "triton"])
def test_table_entries_before_the_window_are_never_read(backend, make_paged_batch):
    """Each sequence's blocks wholly before its window are pointed at a block of NaNs (as
    if given back and reused): a kernel that read one, even masked, would give NaN."""
    ops = backend_ops(backend)
    window, block_size = 17, 16
    paged, q = decode_case(make_paged_batch, torch.float32, block_size, contexts=[48, 40, 7])
    poisoned = poison_before_windows(paged, [48, 40, 7], window, block_size)
    assert not torch.equal(poisoned.block_tables, paged.block_tables)
    expected = ops.paged_decode_attention(*decode_args(paged, q), SCALE, sliding_window=window)
    got = ops.paged_decode_attention(*decode_args(poisoned, q), SCALE, sliding_window=window)
    assert torch.isfinite(got).all() and torch.equal(got, expected)

    # Prefill of a few tokens after a long cached prefix (a speculative step's shape).
    sequences = [(3, 50), (2, 40)]
    paged, q, cu = prefill_case(make_paged_batch, torch.float32, block_size, sequences=sequences)
    earliest = [total - new + 1 for new, total in sequences]  # the first new query's context
    poisoned = poison_before_windows(paged, earliest, window, block_size)
    assert not torch.equal(poisoned.block_tables, paged.block_tables)
    expected = ops.prefill_attention(*prefill_args(paged, q, cu), SCALE, sliding_window=window)
    got = ops.prefill_attention(*prefill_args(poisoned, q, cu), SCALE, sliding_window=window)
    assert torch.isfinite(got).all() and torch.equal(got, expected)


def poison_before_windows(paged, contexts, window, block_size):
    """A copy of `paged` whose table entries wholly before each row's window (for a query
    at context - 1) name one extra block, filled with NaN."""
    nan_block = torch.full_like(paged.k_cache[:1], float("nan"))
    k_cache = torch.cat([paged.k_cache, nan_block])
    v_cache = torch.cat([paged.v_cache, nan_block])
    tables = paged.block_tables.clone()
    for row, context in enumerate(contexts):
        dropped = max(context - window, 0) // block_size
        tables[row, :dropped] = k_cache.shape[0] - 1
    return type(paged)(k_cache, v_cache, tables, paged.context_lens)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("backend", ["torch", "cpu"])
@pytest.mark.parametrize("heads", [None, WIDE_HEADS])
def test_a_prefilled_query_gets_the_bits_of_a_decode_step(backend, dtype, heads, make_paged_batch):
    """What exact resume rests on, windowed: each prefilled row equals a decode step at its
    position, alone, bit for bit."""
    ops = fused_ops() if backend == "cpu" else kernels.get_ops("torch")
    window = 19
    sequences = [(40, 40), (9, 57)]
    paged, q, cu = prefill_case(make_paged_batch, dtype, heads=heads, sequences=sequences)
    prefilled = ops.prefill_attention(*prefill_args(paged, q, cu), SCALE, sliding_window=window)
    differing = []
    for seq, (new_tokens, total) in enumerate(sequences):
        for offset in range(new_tokens):
            row = int(cu[seq]) + offset
            context = torch.tensor([total - new_tokens + offset + 1], dtype=torch.int32)
            decoded = ops.paged_decode_attention(
                q[row : row + 1], paged.k_cache, paged.v_cache, paged.block_tables[seq : seq + 1],
                context.to(DEVICE), SCALE, sliding_window=window,
            )
            if not torch.equal(decoded, prefilled[row : row + 1]):
                differing.append((seq, offset))
    assert not differing, differing


def test_a_bad_window_is_refused(make_paged_batch, torch_ops):
    paged, q = decode_case(make_paged_batch, torch.float32)
    for window in (0, -3, 2.5):
        with pytest.raises(ValueError, match="sliding_window"):
            torch_ops.paged_decode_attention(*decode_args(paged, q), SCALE, sliding_window=window)
        with pytest.raises(ValueError, match="sliding_window"):
            kernels.paged_decode_attention(*decode_args(paged, q), SCALE, sliding_window=window)
        with pytest.raises(ValueError, match="sliding_window"):
            Attention(NUM_Q_HEADS, NUM_KV_HEADS, HEAD_DIM, torch_ops, sliding_window=window)


def test_attention_takes_its_scale_and_window(torch_ops):
    default = Attention(NUM_Q_HEADS, NUM_KV_HEADS, HEAD_DIM, torch_ops)
    assert default.scale == HEAD_DIM**-0.5 and default.sliding_window is None
    windowed = Attention(NUM_Q_HEADS, NUM_KV_HEADS, HEAD_DIM, torch_ops, scale=0.5,
                         sliding_window=4096)
    assert windowed.scale == 0.5 and windowed.sliding_window == 4096
