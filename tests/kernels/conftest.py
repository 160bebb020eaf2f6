"""Shared setup for the kernel tests: the interpreter switch, tolerances, and paged-cache builders.

Without CUDA the Triton kernels run under triton's interpreter, which triton reads when a
kernel is defined, so TRITON_INTERPRET must be set before `kernels` is first imported.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

# Run against this checkout even where an older editable install maps `kernels` elsewhere.
REPO_ROOT = str(Path(__file__).resolve().parents[2])
if REPO_ROOT not in sys.path:
    sys.path.insert(0, REPO_ROOT)

import kernels  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"

# (atol, rtol) per dtype: fp32 agrees to rounding; bf16 to about two ulps of its 8-bit mantissa.
TOLERANCES = {
    torch.float32: (1e-4, 1e-4),
    torch.float16: (2e-3, 2e-3),
    torch.bfloat16: (3e-2, 2e-2),
}


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip_gpu = pytest.mark.skip(reason="needs CUDA")
    here = Path(__file__).resolve().parent
    for item in items:
        if "gpu" in item.keywords and here in Path(item.path).resolve().parents:
            item.add_marker(skip_gpu)


def _assert_close(actual, expected, dtype=None, *, atol=None, rtol=None, label="") -> None:
    """Compare with per-dtype tolerances; on failure name the worst element and its values."""
    dtype = dtype or expected.dtype
    default_atol, default_rtol = TOLERANCES.get(dtype, TOLERANCES[torch.float32])
    atol = default_atol if atol is None else atol
    rtol = default_rtol if rtol is None else rtol
    if actual.shape != expected.shape:
        pytest.fail(f"{label} shape {tuple(actual.shape)} != expected {tuple(expected.shape)}")
    actual64, expected64 = actual.double(), expected.double()
    same_infinity = torch.isinf(actual64) & (actual64 == expected64)
    difference = (actual64 - expected64).abs().masked_fill(same_infinity, 0.0)
    allowed = atol + rtol * expected64.abs().masked_fill(same_infinity, 0.0)
    bad = ~(difference <= allowed)  # NaN differences count as bad
    if bad.any():
        score = torch.where(bad, difference.nan_to_num(float("inf")), -1.0)
        worst = tuple(int(i) for i in torch.unravel_index(score.argmax(), score.shape))
        pytest.fail(
            f"{label} {int(bad.sum())}/{bad.numel()} elements out of tolerance "
            f"(atol={atol}, rtol={rtol}); worst at {worst}: got {actual64[worst].item()}, "
            f"expected {expected64[worst].item()}, max abs diff {difference[worst].item()}"
        )


@pytest.fixture
def assert_close():
    return _assert_close


@pytest.fixture
def triton_ops():
    """The Triton op set, or a skip saying why this machine cannot run it."""
    try:
        return kernels.get_ops("triton")
    except ValueError as error:
        pytest.skip(str(error))


@pytest.fixture
def torch_ops():
    return kernels.get_ops("torch")


@dataclass
class PagedBatch:
    """A filled paged KV cache and the tables that describe the sequences in it."""

    k_cache: torch.Tensor
    v_cache: torch.Tensor
    block_tables: torch.Tensor  # int32, rows padded with -1 past each sequence's blocks
    context_lens: torch.Tensor  # int32

    def dense(self, seq: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Sequence seq's keys and values as [context_len, Hk, D], read block by block."""
        block_size = self.k_cache.shape[1]
        length = int(self.context_lens[seq])
        keys, values = [], []
        for position in range(length):
            block = int(self.block_tables[seq, position // block_size])
            keys.append(self.k_cache[block, position % block_size])
            values.append(self.v_cache[block, position % block_size])
        shape = (0, *self.k_cache.shape[2:])
        if not keys:
            return self.k_cache.new_empty(shape), self.v_cache.new_empty(shape)
        return torch.stack(keys), torch.stack(values)


def _make_paged_batch(context_lens, *, block_size, num_kv_heads, head_dim, dtype, seed=0):
    """Random caches with each sequence's blocks scattered over shuffled physical blocks."""
    generator = torch.Generator().manual_seed(seed)
    blocks_per_seq = [-(-length // block_size) for length in context_lens]
    max_blocks = max(max(blocks_per_seq), 1) + 1  # one spare column of padding
    num_blocks = sum(blocks_per_seq) + 3  # spare physical blocks that nothing points to
    shape = (num_blocks, block_size, num_kv_heads, head_dim)
    k_cache = torch.randn(shape, generator=generator).to(dtype)
    v_cache = torch.randn(shape, generator=generator).to(dtype)
    physical = torch.randperm(num_blocks, generator=generator).tolist()
    block_tables = torch.full((len(context_lens), max_blocks), -1, dtype=torch.int32)
    for seq, count in enumerate(blocks_per_seq):
        block_tables[seq, :count] = torch.tensor(physical[:count], dtype=torch.int32)
        physical = physical[count:]
    return PagedBatch(
        k_cache.to(DEVICE),
        v_cache.to(DEVICE),
        block_tables.to(DEVICE),
        torch.tensor(context_lens, dtype=torch.int32, device=DEVICE),
    )


@pytest.fixture
def make_paged_batch():
    return _make_paged_batch


def _naive_attention(query, keys, values, query_positions, scale):
    """query [Lq, Hq, D] at query_positions [Lq]; keys, values [Lk, Hk, D] at positions 0..Lk-1.

    Each query sees the keys at or before its own position; query heads map to KV heads in
    contiguous groups (head h uses KV head h // (Hq / Hk)).
    """
    group = query.shape[1] // keys.shape[1]
    keys = keys.double().repeat_interleave(group, dim=1)
    values = values.double().repeat_interleave(group, dim=1)
    scores = torch.einsum("qhd,khd->hqk", query.double(), keys) * scale
    key_positions = torch.arange(keys.shape[0], device=query.device)
    visible = key_positions[None, :] <= query_positions[:, None].to(query.device)
    scores = scores.masked_fill(~visible[None], float("-inf"))
    return torch.einsum("hqk,khd->qhd", scores.softmax(dim=-1), values)


@pytest.fixture
def naive_attention():
    """Dense attention written out step by step in float64, the yardstick for the refs."""
    return _naive_attention
