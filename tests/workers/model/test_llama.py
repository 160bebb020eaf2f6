"""CausalLM on tiny random Llama and Qwen3 checkpoints against a dense fp64 reference."""

from __future__ import annotations

import pytest
import torch

from .dense_reference import dense_logits
from .paged_runner import PagedRunner

TOLERANCE = 1e-4


def _prompt(tiny, length: int, seed: int) -> list[int]:
    generator = torch.Generator().manual_seed(seed)
    vocab = tiny.loaded.tokenizer.vocab_size
    return torch.randint(0, vocab, (length,), generator=generator).tolist()


def _assert_close(actual: torch.Tensor, expected: torch.Tensor, what: str) -> None:
    worst = (actual.double() - expected).abs().max().item()
    assert worst < TOLERANCE, f"{what}: max abs logit difference {worst:.3g}"


def test_prefill_logits_match_reference_at_every_position(tiny):
    ids = _prompt(tiny, 23, seed=1)
    runner = PagedRunner(tiny.loaded.model, block_size=4, num_blocks=16)
    logits = runner.step({"a": ids}, is_prefill=True, every_position=True)["a"]
    assert logits.dtype == torch.float32
    assert logits.shape == (len(ids), tiny.config["vocab_size"])
    _assert_close(logits, dense_logits(tiny.config, tiny.state, ids), "prefill")


@pytest.mark.parametrize("block_size", [3, 5])
def test_batched_prefill_then_decode_matches_reference(tiny, block_size):
    """Two sequences share each step; 11 and 17 tokens do not fill whole blocks."""
    prompts = {"a": _prompt(tiny, 11, seed=2), "b": _prompt(tiny, 17, seed=3)}
    runner = PagedRunner(tiny.loaded.model, block_size=block_size, num_blocks=32)
    logits = runner.step(prompts, is_prefill=True)
    sequences = {seq: list(ids) for seq, ids in prompts.items()}
    for step in range(6):
        for seq, ids in sequences.items():
            expected = dense_logits(tiny.config, tiny.state, ids)[-1]
            _assert_close(logits[seq], expected, f"sequence {seq} step {step}")
        # Feed the reference's argmax back, as greedy decoding would.
        next_tokens = {seq: [int(logits[seq].argmax())] for seq in sequences}
        for seq, token in next_tokens.items():
            sequences[seq] += token
        logits = runner.step(next_tokens, is_prefill=False)


def test_prefill_continuing_a_cached_prefix_matches_reference(tiny):
    """A second prefill chunk attends to the first chunk's cached keys (chunked prefill)."""
    ids = _prompt(tiny, 19, seed=4)
    runner = PagedRunner(tiny.loaded.model, block_size=4, num_blocks=16)
    runner.step({"a": ids[:10]}, is_prefill=True)
    logits = runner.step({"a": ids[10:]}, is_prefill=True)["a"]
    _assert_close(logits, dense_logits(tiny.config, tiny.state, ids)[-1], "second chunk")


def test_matches_transformers(tiny):
    """The same directory through transformers' own implementation agrees too."""
    transformers = pytest.importorskip("transformers")
    reference = transformers.AutoModelForCausalLM.from_pretrained(
        str(tiny.directory), dtype=torch.float32, attn_implementation="eager"
    ).eval()
    ids = _prompt(tiny, 13, seed=5)
    with torch.inference_mode():
        expected = reference(torch.tensor([ids])).logits[0, -1]
    runner = PagedRunner(tiny.loaded.model, block_size=4, num_blocks=8)
    actual = runner.step({"a": ids}, is_prefill=True)["a"]
    _assert_close(actual, expected.double(), "transformers")


def test_wrong_number_of_caches_is_an_error(tiny):
    runner = PagedRunner(tiny.loaded.model, block_size=4, num_blocks=4)
    runner.kv_caches = runner.kv_caches[:1]
    with pytest.raises(ValueError, match="pairs"):
        runner.step({"a": [1, 2, 3]}, is_prefill=True)
