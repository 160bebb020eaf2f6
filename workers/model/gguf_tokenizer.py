"""Rebuilds a `tokenizers.Tokenizer` from the vocabulary a GGUF file stores, splitting and
merging text as llama.cpp's `llama-vocab.cpp` does for the same file."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from tokenizers import AddedToken, Tokenizer, decoders, models

from workers.model.gguf_metadata import read_gguf_metadata
from workers.model.gguf_pre_tokenizer import byte_level_pre_tokenizer, pre_tokenizer_rule
from workers.model.gguf_sentencepiece import gemma4_tokenizer, sentencepiece_tokenizer

# llama.cpp token types (llama_token_type in llama.h).
TOKEN_TYPE_NORMAL = 1
TOKEN_TYPE_UNKNOWN = 2
TOKEN_TYPE_CONTROL = 3
TOKEN_TYPE_USER_DEFINED = 4

# Tokens that stay whole wherever they appear in text, as llama.cpp's special-token cache
# holds them: special ones (decoding may skip them) and user-defined ones (always decoded).
_SPECIAL_TYPES = (TOKEN_TYPE_CONTROL, TOKEN_TYPE_UNKNOWN)
_WHOLE_TYPES = (*_SPECIAL_TYPES, TOKEN_TYPE_USER_DEFINED)


@dataclass(frozen=True, slots=True)
class GgufVocabulary:
    """What a GGUF file says about its tokenizer (`tokenizer.ggml.*`)."""

    model: str
    pre: str
    tokens: Sequence[str]
    token_types: Sequence[int]
    scores: Sequence[float]
    merges: Sequence[str]
    add_space_prefix: bool
    # llama.cpp sets per-token attributes by model name (Phi-3's special tokens eat the
    # whitespace after them), so the name is part of the tokenizer.
    name: str

    @classmethod
    def from_metadata(cls, metadata: Mapping[str, Any]) -> GgufVocabulary:
        tokens = list(metadata.get("tokenizer.ggml.tokens") or [])
        types = list(metadata.get("tokenizer.ggml.token_type") or [TOKEN_TYPE_NORMAL] * len(tokens))
        scores = list(metadata.get("tokenizer.ggml.scores") or [0.0] * len(tokens))
        for label, values in (("token types", types), ("scores", scores)):
            if len(values) < len(tokens):
                raise ValueError(f"{len(tokens)} tokens but {len(values)} {label}")
        model = str(metadata.get("tokenizer.ggml.model") or "")
        return cls(
            model=model,
            pre=str(metadata.get("tokenizer.ggml.pre") or "default"),
            tokens=tokens,
            token_types=types[: len(tokens)],
            scores=[float(score) for score in scores[: len(tokens)]],
            merges=list(metadata.get("tokenizer.ggml.merges") or []),
            # SentencePiece vocabularies prefix a space unless the file says otherwise.
            add_space_prefix=bool(
                metadata.get("tokenizer.ggml.add_space_prefix", model == "llama")
            ),
            name=str(metadata.get("general.name") or ""),
        )


def read_gguf_vocabulary(path: Path) -> GgufVocabulary:
    return GgufVocabulary.from_metadata(read_gguf_metadata(path, ("general.", "tokenizer.ggml.")))


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


def _byte_level_tokenizer(vocabulary: GgufVocabulary) -> Tokenizer:
    rule = pre_tokenizer_rule(vocabulary.pre)
    alphabet = _byte_alphabet()
    spelled = set(alphabet.values())
    raw = set(vocabulary.tokens)
    vocab: dict[str, int] = {}
    for index, (token, kind) in enumerate(
        zip(vocabulary.tokens, vocabulary.token_types, strict=True)
    ):
        if spelled.issuperset(token) or kind in _WHOLE_TYPES:
            # A token that stays whole in text is matched before splitting, in raw text.
            vocab[token] = index
            continue
        # A few converters store tokens in raw text (a literal space, say): respelled in the
        # byte alphabet, the merges reach them, unless the respelling is another token
        # (llama.cpp reaches only that other one).
        respelled = "".join(alphabet[b] for b in token.encode("utf-8", "surrogateescape"))
        vocab[token if respelled in raw else respelled] = index
    pairs = [(left, right) for left, right in (merge.split(" ", 1) for merge in vocabulary.merges)]
    backend = Tokenizer(
        models.BPE(
            vocab=vocab,
            merges=pairs,
            fuse_unk=False,
            byte_fallback=False,
            ignore_merges=rule.ignore_merges,
        )
    )
    backend.pre_tokenizer = byte_level_pre_tokenizer(rule)
    backend.decoder = decoders.ByteLevel()
    return backend


_BUILDERS: dict[str, Callable[[GgufVocabulary], Tokenizer]] = {
    "gpt2": _byte_level_tokenizer,
    "llama": sentencepiece_tokenizer,
    "gemma4": gemma4_tokenizer,
}
SUPPORTED_TOKENIZER_MODELS = tuple(_BUILDERS)


def build_gguf_tokenizer(vocabulary: GgufVocabulary) -> Tokenizer:
    """A tokenizer that splits text into the ids llama.cpp gives for the same file."""
    builder = _BUILDERS.get(vocabulary.model)
    if builder is None:
        raise ValueError(
            f"unsupported GGUF tokenizer model {vocabulary.model!r}; supported: "
            "gpt2 (byte-level BPE), llama (SentencePiece), gemma4 (SentencePiece-style BPE)"
        )
    backend = builder(vocabulary)
    _add_whole_tokens(backend, vocabulary)
    if backend.get_vocab_size(with_added_tokens=True) != len(vocabulary.tokens):
        raise ValueError("the GGUF vocabulary has duplicate tokens; cannot rebuild its tokenizer")
    return backend


def _add_whole_tokens(backend: Tokenizer, vocabulary: GgufVocabulary) -> None:
    """Control tokens (e.g. <|im_start|>) and user-defined ones (e.g. <think>) must stay whole
    wherever they appear in text, matched before any normalization."""
    rstrip = _rstrip_tokens(vocabulary)
    special: list[AddedToken] = []
    user_defined: list[AddedToken] = []
    for token, kind in zip(vocabulary.tokens, vocabulary.token_types, strict=True):
        if kind in _SPECIAL_TYPES:
            special.append(
                AddedToken(token, special=True, normalized=False, rstrip=token in rstrip)
            )
        elif kind == TOKEN_TYPE_USER_DEFINED:
            user_defined.append(
                AddedToken(token, special=False, normalized=False, rstrip=token in rstrip)
            )
    if special:
        backend.add_special_tokens(special)
    if user_defined:
        backend.add_tokens(user_defined)


def _rstrip_tokens(vocabulary: GgufVocabulary) -> frozenset[str]:
    """llama.cpp's per-model attributes: Phi-3's special tokens swallow the whitespace that
    follows them (its template's newline after `<|user|>`), except <unk>, <s>, <|endoftext|>."""
    name = vocabulary.name.lower()
    if "phi-3" not in name and "phi3" not in name:
        return frozenset()
    whole = {
        token
        for token, kind in zip(vocabulary.tokens, vocabulary.token_types, strict=True)
        if kind in _WHOLE_TYPES
    }
    return frozenset((whole | {"</s>"}) - {"<unk>", "<s>", "<|endoftext|>"})
