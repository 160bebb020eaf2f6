"""apply_logits_processors: the reference against a per-element loop of the documented rules,
the Triton launcher against the reference."""

import math

import pytest
import torch

import kernels

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def make_inputs(batch, vocab_size, *, with_bias=True, seed=5):
    generator = torch.Generator().manual_seed(seed)
    inputs = dict(
        logits=torch.randn(batch, vocab_size, generator=generator) * 4,
        output_token_counts=torch.randint(0, 4, (batch, vocab_size), generator=generator).int()
        * (torch.rand(batch, vocab_size, generator=generator) < 0.2),
        prompt_token_mask=torch.rand(batch, vocab_size, generator=generator) < 0.1,
        presence=torch.rand(batch, generator=generator),
        frequency=torch.rand(batch, generator=generator),
        repetition=torch.rand(batch, generator=generator) + 0.5,
        logit_bias=torch.randn(batch, vocab_size, generator=generator) if with_bias else None,
        forced_token_ids=torch.full((batch,), -1, dtype=torch.int64),
    )
    inputs["output_token_counts"] = inputs["output_token_counts"].int()
    if batch > 1:
        inputs["forced_token_ids"][1] = vocab_size - 1  # the last token, in the last tile
    if batch > 2:
        inputs["forced_token_ids"][2] = 0
        inputs["repetition"][2] = 1.0  # neutral rows next to penalized ones
    if batch > 3:
        inputs["presence"][3] = 0.0
        inputs["frequency"][3] = 0.0
    return {name: None if value is None else value.to(DEVICE) for name, value in inputs.items()}


def naive_processed_logits(inputs):
    """The rules of docs/internals.md applied one logit at a time."""
    logits = inputs["logits"].double().clone()
    batch, vocab_size = logits.shape
    for row in range(batch):
        repetition = inputs["repetition"][row].item()
        for token in range(vocab_size):
            value = logits[row, token].item()
            count = int(inputs["output_token_counts"][row, token])
            if count > 0 or bool(inputs["prompt_token_mask"][row, token]):
                value = value / repetition if value > 0 else value * repetition
            value -= inputs["frequency"][row].item() * count
            value -= inputs["presence"][row].item() * (count > 0)
            if inputs["logit_bias"] is not None:
                value += inputs["logit_bias"][row, token].item()
            forced = int(inputs["forced_token_ids"][row])
            logits[row, token] = value if forced < 0 or forced == token else -math.inf
    return logits


@pytest.mark.parametrize("with_bias", [False, True])
def test_reference_matches_rules(with_bias, assert_close):
    inputs = make_inputs(4, 50, with_bias=with_bias)
    expected = naive_processed_logits(inputs)
    kernels.apply_logits_processors_ref(**inputs)
    assert_close(inputs["logits"], expected, torch.float32)


def test_reference_leaves_neutral_rows_alone():
    inputs = make_inputs(3, 40, with_bias=False)
    inputs["presence"].zero_()
    inputs["frequency"].zero_()
    inputs["repetition"].fill_(1.0)
    inputs["forced_token_ids"].fill_(-1)
    original = inputs["logits"].clone()
    kernels.apply_logits_processors_ref(**inputs)
    assert torch.equal(inputs["logits"], original)


@pytest.mark.parametrize("batch", [1, 3, 7])
@pytest.mark.parametrize("vocab_size", [50, 2500])  # 2500 spans three vocab tiles
@pytest.mark.parametrize("with_bias", [False, True])
def test_triton_matches_reference(batch, vocab_size, with_bias, triton_ops, assert_close):
    inputs = make_inputs(batch, vocab_size, with_bias=with_bias)
    expected = dict(inputs, logits=inputs["logits"].clone())
    kernels.apply_logits_processors_ref(**expected)
    assert triton_ops.apply_logits_processors(**inputs) is None
    assert_close(inputs["logits"], expected["logits"], torch.float32)


def test_launcher_rejects_bad_inputs():
    inputs = make_inputs(3, 20)
    bad_cases = [
        ("logits", inputs["logits"].double(), "logits must have dtype"),
        (
            "output_token_counts",
            inputs["output_token_counts"].long(),
            "output_token_counts must have dtype",
        ),
        ("prompt_token_mask", inputs["prompt_token_mask"][:2], "prompt_token_mask must have shape"),
        ("presence", inputs["presence"][:2], "presence must have shape"),
        ("repetition", inputs["repetition"].double(), "repetition must have dtype"),
        ("logit_bias", inputs["logit_bias"][:, :10], "logit_bias must have shape"),
        ("forced_token_ids", inputs["forced_token_ids"].int(), "forced_token_ids must have dtype"),
    ]
    for name, bad_value, message in bad_cases:
        with pytest.raises(ValueError, match=message):
            kernels.apply_logits_processors(**dict(inputs, **{name: bad_value}))


@pytest.mark.gpu
def test_triton_full_size(triton_ops, assert_close):
    inputs = make_inputs(32, 49152)
    expected = dict(inputs, logits=inputs["logits"].clone())
    kernels.apply_logits_processors_ref(**expected)
    triton_ops.apply_logits_processors(**inputs)
    assert_close(inputs["logits"], expected["logits"], torch.float32)
