"""AttentionMetadata validation and the KV cache layout."""

from __future__ import annotations

import pytest
import torch

from workers.model import AttentionMetadata, allocate_kv_cache, kv_cache_bytes_per_block


def _metadata(**changes):
    fields = dict(
        is_prefill=True,
        slot_mapping=torch.arange(5),
        block_tables=torch.zeros(2, 3, dtype=torch.int32),
        context_lens=torch.tensor([2, 3], dtype=torch.int32),
        cu_seqlens_q=torch.tensor([0, 2, 5], dtype=torch.int32),
    )
    fields.update(changes)
    return AttentionMetadata(**fields)


def test_valid_metadata():
    assert _metadata().is_prefill
    decode = _metadata(is_prefill=False, cu_seqlens_q=None, slot_mapping=torch.arange(2))
    assert decode.cu_seqlens_q is None


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"cu_seqlens_q": None}, "needs cu_seqlens_q"),
        ({"block_tables": torch.zeros(3, dtype=torch.int32)}, "block_tables"),
        ({"context_lens": torch.tensor([1], dtype=torch.int32)}, "context_lens"),
        ({"cu_seqlens_q": torch.tensor([0, 5], dtype=torch.int32)}, "cu_seqlens_q"),
    ],
)
def test_invalid_metadata(changes, message):
    with pytest.raises(ValueError, match=message):
        _metadata(**changes)


def test_kv_cache_layout(smollm2):
    config = smollm2.config
    caches = allocate_kv_cache(
        config, num_blocks=4, block_size=16, device="cpu", dtype=torch.float16
    )
    assert len(caches) == config.num_layers
    k_cache, v_cache = caches[0]
    assert k_cache.shape == v_cache.shape == (4, 16, config.num_kv_heads, config.head_dim)
    assert k_cache.dtype == torch.float16 and not k_cache.any()
    per_block = kv_cache_bytes_per_block(config, 16, torch.float16)
    assert per_block == sum(k.nbytes + v.nbytes for k, v in caches) // 4
    with pytest.raises(ValueError):
        allocate_kv_cache(config, num_blocks=0, block_size=16, device="cpu", dtype=torch.float16)
