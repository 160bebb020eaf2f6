"""SentencePiece vocabularies from GGUF files as `tokenizers` BPE models: spaces spelled `▁`,
characters outside the vocabulary spelled as `<0xXX>` byte tokens, merges as llama.cpp
applies them to the same file."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers

if TYPE_CHECKING:
    from workers.model.gguf_tokenizer import GgufVocabulary

SPACE_MARKER = "\u2581"


def _vocab(tokens: Sequence[str]) -> dict[str, int]:
    """Token -> id. llama.cpp names an empty token after its id; a token that is not valid
    UTF-8 can never match text, so it gets such a name too (its id keeps its place)."""
    vocab: dict[str, int] = {}
    for index, token in enumerate(tokens):
        if not token:
            token = f"[EMPTY_{index}]"
        elif _has_surrogates(token):
            token = f"[INVALID_{index}]"
        vocab[token] = index
    return vocab


def _has_surrogates(token: str) -> bool:
    try:
        token.encode()
    except UnicodeEncodeError:
        return True
    return False


def _merges_by_score(vocab: dict[str, int], scores: Sequence[float]) -> list[tuple[str, str]]:
    """SentencePiece files carry scores, not merges. llama.cpp merges, among adjacent pieces
    whose concatenation is a token, the one whose token scores highest, leftmost on a tie.
    Ranking every split of every token by that token's score gives `tokenizers` (lowest
    rank first, leftmost on a tie) the same order; only two different pairs of equal score
    competing for one piece could differ, and the random test against llama.cpp's own loop
    finds none."""
    ranked: list[tuple[float, int, int, str, str]] = []
    for token, index in vocab.items():
        for cut in range(1, len(token)):
            left, right = token[:cut], token[cut:]
            if left in vocab and right in vocab:
                ranked.append((-scores[index], index, cut, left, right))
    ranked.sort()
    return [(left, right) for _, _, _, left, right in ranked]


def _spaces_decoder(strip_prefix: bool) -> decoders.Decoder:
    steps = [decoders.Replace(SPACE_MARKER, " "), decoders.ByteFallback(), decoders.Fuse()]
    if strip_prefix:
        # The space the encoder put in front of the text is not part of it.
        steps.append(decoders.Strip(" ", 1, 0))
    return decoders.Sequence(steps)


def sentencepiece_tokenizer(vocabulary: GgufVocabulary) -> Tokenizer:
    """`tokenizer.ggml.model == "llama"`: Llama 2, Mistral v0.1-v0.3, Phi-3, Gemma 1-3."""
    vocab = _vocab(vocabulary.tokens)
    backend = Tokenizer(
        models.BPE(
            vocab=vocab,
            merges=_merges_by_score(vocab, vocabulary.scores),
            byte_fallback=True,
            fuse_unk=False,
        )
    )
    # llama.cpp puts the space in front of every run of text that starts the input or
    # follows a special token, whatever the text starts with.
    steps: list[normalizers.Normalizer] = []
    if vocabulary.add_space_prefix:
        steps.append(normalizers.Prepend(SPACE_MARKER))
    steps.append(normalizers.Replace(" ", SPACE_MARKER))
    backend.normalizer = normalizers.Sequence(steps)
    backend.decoder = _spaces_decoder(vocabulary.add_space_prefix)
    return backend


def gemma4_tokenizer(vocabulary: GgufVocabulary) -> Tokenizer:
    """`tokenizer.ggml.model == "gemma4"`: BPE with merges over UTF-8 text, spaces spelled
    `▁` and no prefix space; only runs of newlines are cut apart before merging. llama.cpp
    looks a run of newlines up whole before merging it; the file's merges build every such
    run it has as one token anyway, while looking up every word whole would not merge as
    llama.cpp does (a line reading `<unused4>` is pieces there)."""
    vocab = _vocab(vocabulary.tokens)
    merges = []
    for merge in vocabulary.merges:
        # llama.cpp cuts at the first space after the first character: a piece may be a space.
        head, _, tail = merge[1:].partition(" ")
        merges.append((merge[:1] + head, tail))
    backend = Tokenizer(
        models.BPE(
            vocab=vocab,
            merges=merges,
            byte_fallback=True,
            fuse_unk=False,
        )
    )
    backend.normalizer = normalizers.Replace(" ", SPACE_MARKER)
    backend.pre_tokenizer = pre_tokenizers.Split(Regex("\n+"), behavior="isolated")
    backend.decoder = _spaces_decoder(strip_prefix=False)
    return backend
