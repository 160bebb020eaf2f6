"""Logit parity with transformers on SmolLM2: spate's prefill against a stored fixture.

The fixture comes from scripts/make_logit_fixture.py (transformers, same GGUF, float32).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from .paged_runner import PagedRunner

FIXTURE = Path(__file__).parent / "fixtures" / "smollm2_logits.npz"
TOLERANCE = 1e-3


@pytest.fixture(scope="module")
def fixture():
    with np.load(FIXTURE) as data:
        return {name: data[name] for name in data.files}


def _prompts(fixture):
    for row, length in enumerate(fixture["lengths"]):
        yield row, str(fixture["prompts"][row]), fixture["token_ids"][row, :length].tolist()


def test_tokenizer_and_template_reproduce_the_fixture_prompts(smollm2, fixture):
    for row, prompt, ids in _prompts(fixture):
        assert smollm2.tokenizer.encode(prompt) == ids, f"prompt {row}"
    chat = smollm2.chat_template.render(
        [{"role": "user", "content": "What is the capital of France?"}]
    )
    assert chat == str(fixture["prompts"][0])


def test_prefill_logits_match_transformers(smollm2, fixture):
    worst = 0.0
    for row, _, ids in _prompts(fixture):
        # A block size that does not divide the prompt lengths exercises a partial last block.
        runner = PagedRunner(smollm2.model, block_size=16, num_blocks=8)
        logits = runner.step({"p": ids}, is_prefill=True)["p"]
        expected = torch.from_numpy(fixture["logits"][row])
        difference = (logits - expected).abs().max().item()
        worst = max(worst, difference)
        assert int(logits.argmax()) == int(expected.argmax()), f"prompt {row}"
    print(f"max abs logit difference vs transformers: {worst:.3g}")
    assert worst < TOLERANCE
