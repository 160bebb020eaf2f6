"""Tokenizer built from the GGUF vocabulary against transformers' tokenizer for the same file."""

from __future__ import annotations

import pytest

PARITY_TEXTS = [
    "What is the capital of France?",
    "Hello, world! I'm here; you're there.\n\n\tcode()",
    "😀 emoji 🤗🤗 and 日本語のテキスト",
    "Ünïcödé — “quotes” café naïve Zürich",
    "a 12345 b, 1,000,000.50$ x1 2",
    "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
    "  two  spaces, trailing  ",
    "a\r\nb\n\n\n",
    "<think>not a special token here</think>",
]


@pytest.mark.parametrize("text", PARITY_TEXTS)
def test_encoding_matches_transformers(smollm2, hf_gguf_tokenizer, text):
    assert smollm2.tokenizer.encode(text) == hf_gguf_tokenizer.encode(
        text, add_special_tokens=False
    )


@pytest.mark.parametrize("text", PARITY_TEXTS)
def test_decoding_matches_transformers(smollm2, hf_gguf_tokenizer, text):
    ids = smollm2.tokenizer.encode(text)
    for skip in (True, False):
        assert smollm2.tokenizer.decode(ids, skip_special_tokens=skip) == hf_gguf_tokenizer.decode(
            ids, skip_special_tokens=skip
        )
    assert smollm2.tokenizer.decode(ids, skip_special_tokens=False) == text


def test_digits_split_one_by_one_after_whitespace(smollm2):
    """SmolLM2's own tokenizer splits digits before the byte-level regex, as llama.cpp's
    "smollm" pre-tokenizer does. transformers' GGUF loader has no rule for "smollm" and
    differs on a run of spaces before a digit; spate follows the model's tokenizer."""
    tokenizer = smollm2.tokenizer
    double_space = tokenizer.token_to_id("ĠĠ")
    assert tokenizer.encode("a  1") == [
        tokenizer.token_to_id("a"),
        double_space,
        tokenizer.token_to_id("1"),
    ]


def test_special_tokens_encode_whole(smollm2):
    tokenizer = smollm2.tokenizer
    for token in ("<|im_start|>", "<|im_end|>", "<|endoftext|>"):
        token_id = tokenizer.token_to_id(token)
        assert tokenizer.encode(token) == [token_id]
        assert tokenizer.id_to_token(token_id) == token


def test_eos_and_bos(smollm2):
    tokenizer = smollm2.tokenizer
    assert tokenizer.token_to_id("<|im_end|>") in tokenizer.eos_token_ids
    assert tokenizer.vocab_size == 49152
    text = "Hello"
    assert tokenizer.encode(text)[0] != tokenizer.bos_token_id
    assert tokenizer.encode(text, add_bos_token=True) == [
        tokenizer.bos_token_id,
        *tokenizer.encode(text),
    ]


def test_decode_skips_specials_by_default(smollm2):
    tokenizer = smollm2.tokenizer
    ids = tokenizer.encode("<|im_start|>assistant\nParis<|im_end|>")
    assert tokenizer.decode(ids) == "assistant\nParis"
    assert (
        tokenizer.decode(ids, skip_special_tokens=False) == "<|im_start|>assistant\nParis<|im_end|>"
    )
