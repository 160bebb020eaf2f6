"""IncrementalDetokenizer: deltas never split a character and always add up to the full decode."""

from __future__ import annotations

import random

import pytest

from workers.model.detokenizer import IncrementalDetokenizer


def _deltas(tokenizer, ids, **kwargs) -> list[str]:
    detokenizer = IncrementalDetokenizer(tokenizer, **kwargs)
    deltas = [detokenizer.push(token_id) for token_id in ids]
    deltas.append(detokenizer.flush())
    return deltas


@pytest.mark.parametrize(
    "text",
    ["Hello 🤗 world, café 日本語!", "🤗🤗🤗", "Paris<|im_end|>\n<|im_start|>user", "x\n\n  y"],
)
@pytest.mark.parametrize("skip_special_tokens", [True, False])
def test_deltas_add_up_to_the_full_decode(smollm2, text, skip_special_tokens):
    tokenizer = smollm2.tokenizer
    ids = tokenizer.encode(text)
    deltas = _deltas(tokenizer, ids, skip_special_tokens=skip_special_tokens)
    assert "".join(deltas) == tokenizer.decode(ids, skip_special_tokens=skip_special_tokens)
    assert not any("\ufffd" in delta for delta in deltas)


def test_emoji_split_across_tokens_is_held_until_complete(smollm2):
    tokenizer = smollm2.tokenizer
    ids = tokenizer.encode("🤗")
    assert len(ids) > 1, "the test needs an emoji that takes several byte tokens"
    detokenizer = IncrementalDetokenizer(tokenizer)
    assert [detokenizer.push(token_id) for token_id in ids] == [""] * (len(ids) - 1) + ["🤗"]


def test_specials_are_skipped_or_kept(smollm2):
    tokenizer = smollm2.tokenizer
    ids = tokenizer.encode("Paris<|im_end|>")
    assert _deltas(tokenizer, ids)[-2:] == ["", ""]
    assert "".join(_deltas(tokenizer, ids, skip_special_tokens=False)) == "Paris<|im_end|>"


def test_flush_releases_an_incomplete_character(smollm2):
    tokenizer = smollm2.tokenizer
    first_byte_of_emoji = tokenizer.encode("🤗")[:1]
    detokenizer = IncrementalDetokenizer(tokenizer)
    assert detokenizer.push(first_byte_of_emoji[0]) == ""
    assert detokenizer.flush() == tokenizer.decode(first_byte_of_emoji)
    assert detokenizer.flush() == ""


def test_prompt_context_is_not_emitted(smollm2):
    tokenizer = smollm2.tokenizer
    prompt = tokenizer.encode("<|im_start|>assistant\n")
    answer = tokenizer.encode("The capital is Paris.")
    detokenizer = IncrementalDetokenizer(tokenizer, prompt_token_ids=prompt)
    text = "".join(detokenizer.push(token_id) for token_id in answer)
    assert text + detokenizer.flush() == "The capital is Paris."
    assert detokenizer.output_token_ids == answer


def test_random_token_streams(smollm2):
    """Arbitrary ids, invalid UTF-8 included: no text is lost or repeated."""
    tokenizer = smollm2.tokenizer
    rng = random.Random(0)
    # Byte tokens (ids of single bytes) make broken characters likely.
    byte_tokens = [i for i in range(17, 300)]
    for _ in range(40):
        ids = [
            rng.choice(byte_tokens) if rng.random() < 0.7 else rng.randrange(49152)
            for _ in range(rng.randrange(1, 30))
        ]
        for skip in (True, False):
            deltas = _deltas(tokenizer, ids, skip_special_tokens=skip)
            assert "".join(deltas) == tokenizer.decode(ids, skip_special_tokens=skip)
