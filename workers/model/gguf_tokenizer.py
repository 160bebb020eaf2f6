"""Rebuilds a byte-level BPE `tokenizers.Tokenizer` from the vocabulary a GGUF file stores."""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers

# llama.cpp token types (llama_token_type in llama.h).
TOKEN_TYPE_CONTROL = 3
TOKEN_TYPE_USER_DEFINED = 4

_LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def _split_then_bytes(pattern: str) -> pre_tokenizers.PreTokenizer:
    return pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(pattern), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )


def _pre_tokenizer(name: str) -> pre_tokenizers.PreTokenizer:
    """The split the merges were learned with, by llama.cpp's `tokenizer.ggml.pre` name."""
    if name in ("gpt2", "default"):
        return pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if name in ("smollm", "starcoder"):
        # Every digit on its own, then GPT-2's split: what SmolLM's tokenizer.json declares
        # and llama.cpp's "smollm" pre-tokenizer reproduces.
        return pre_tokenizers.Sequence(
            [
                pre_tokenizers.Digits(individual_digits=True),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
            ]
        )
    if name in ("llama-bpe", "llama3", "llama-v3", "smaug-bpe", "dbrx", "falcon3"):
        return _split_then_bytes(_LLAMA3_SPLIT)
    if name in ("qwen2", "deepseek-r1-qwen"):
        return _split_then_bytes(_QWEN2_SPLIT)
    raise ValueError(
        f"unsupported GGUF pre-tokenizer {name!r}; supported: gpt2, smollm, starcoder, "
        "llama-bpe, qwen2"
    )


@lru_cache(maxsize=1)
def _byte_alphabet() -> dict[int, str]:
    """GPT-2's byte -> printable character table that byte-level vocabularies are spelled in."""
    printable = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("¡"), ord("¬") + 1))
        + list(range(ord("®"), ord("ÿ") + 1))
    )
    chars = list(printable)
    extra = 0
    for byte in range(256):
        if byte not in printable:
            printable.append(byte)
            chars.append(256 + extra)
            extra += 1
    return {byte: chr(char) for byte, char in zip(printable, chars, strict=True)}


def build_gguf_tokenizer(
    model: str,
    pre: str,
    tokens: Sequence[str],
    merges: Sequence[str],
    token_types: Sequence[int],
) -> Tokenizer:
    """A tokenizer equal to the one the GGUF was converted from (byte-level BPE only)."""
    if model != "gpt2":
        raise ValueError(
            f"unsupported GGUF tokenizer model {model!r}; only byte-level BPE ('gpt2') is supported"
        )
    if token_types and len(token_types) != len(tokens):
        raise ValueError(f"{len(tokens)} tokens but {len(token_types)} token types")
    token_types = token_types or [1] * len(tokens)
    alphabet = _byte_alphabet()
    spelled = set(alphabet.values())
    # Converters store a few added tokens in raw text (a literal space, say); the BPE model
    # must see every entry in the byte alphabet, so those are respelled.
    vocab = {
        token if set(token) <= spelled else "".join(alphabet[b] for b in token.encode()): index
        for index, token in enumerate(tokens)
    }
    pairs = [(left, right) for left, right in (merge.split(" ", 1) for merge in merges)]
    backend = Tokenizer(models.BPE(vocab=vocab, merges=pairs, fuse_unk=False, byte_fallback=False))
    backend.pre_tokenizer = _pre_tokenizer(pre)
    backend.decoder = decoders.ByteLevel()
    # Control tokens (e.g. <|im_start|>) and user-defined ones (e.g. <think>) must stay whole
    # wherever they appear in text. One spelled outside the byte alphabet was respelled above
    # and can only be reached through the bytes it stands for, so it is not added.
    control = [
        AddedToken(token, special=True, normalized=False)
        for token, kind in zip(tokens, token_types, strict=True)
        if kind == TOKEN_TYPE_CONTROL and set(token) <= spelled
    ]
    user_defined = [
        AddedToken(token, special=False, normalized=False)
        for token, kind in zip(tokens, token_types, strict=True)
        if kind == TOKEN_TYPE_USER_DEFINED and set(token) <= spelled
    ]
    if control:
        backend.add_special_tokens(control)
    if user_defined:
        backend.add_tokens(user_defined)
    if backend.get_vocab_size(with_added_tokens=True) != len(tokens):
        raise ValueError("the GGUF vocabulary has duplicate tokens; cannot rebuild its tokenizer")
    return backend
