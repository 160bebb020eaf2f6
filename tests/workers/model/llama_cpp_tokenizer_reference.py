"""llama.cpp's merge loops (`llm_tokenizer_spm_session` and `llm_tokenizer_bpe_session` in
src/llama-vocab.cpp) transcribed to plain Python: slow, but line for line what llama.cpp
does, so that random text can be checked against them where no `.out` file covers it."""

from __future__ import annotations

import heapq
import re
from collections.abc import Mapping, Sequence

_SPACE = "\u2581"


def _bytes(text: str, vocab: Mapping[str, int]) -> list[int]:
    return [vocab[f"<0x{byte:02X}>"] for byte in text.encode() if f"<0x{byte:02X}>" in vocab]


def _merge(symbols: list[list], priority, vocab: Mapping[str, int]) -> list[int]:
    """Symbols are [text, prev, next]; `priority(left, right)` is a sort key for merging the
    pair (lower first; the left index breaks ties) or None when the pair does not merge."""
    queue: list[tuple] = []

    def push(left: int, right: int) -> None:
        if left == -1 or right == -1:
            return
        key = priority(symbols[left][0], symbols[right][0])
        if key is not None:
            heapq.heappush(queue, (key, left, right, symbols[left][0] + symbols[right][0]))

    for index in range(1, len(symbols)):
        push(index - 1, index)
    while queue:
        _, left, right, text = heapq.heappop(queue)
        left_symbol, right_symbol = symbols[left], symbols[right]
        if not left_symbol[0] or not right_symbol[0] or left_symbol[0] + right_symbol[0] != text:
            continue  # one side merged elsewhere since this pair was queued
        left_symbol[0] = text
        right_symbol[0] = ""
        left_symbol[2] = right_symbol[2]
        if right_symbol[2] >= 0:
            symbols[right_symbol[2]][1] = left
        push(left_symbol[1], left)
        push(left, left_symbol[2])
    ids: list[int] = []
    for text, _, _ in symbols:
        if text:
            ids.extend([vocab[text]] if text in vocab else _bytes(text, vocab))
    return ids


def _symbols(text: str) -> list[list]:
    symbols = [[char, index - 1, index + 1] for index, char in enumerate(text)]
    if symbols:
        symbols[-1][2] = -1
    return symbols


def sentencepiece_reference(
    text: str, vocab: Mapping[str, int], scores: Sequence[float], add_space_prefix: bool
) -> list[int]:
    """One run of text (no special tokens in it) as llama.cpp tokenizes an SPM vocabulary."""
    if not text:
        return []
    escaped = ((" " if add_space_prefix else "") + text).replace(" ", _SPACE)

    def priority(left: str, right: str) -> float | None:
        token = vocab.get(left + right)
        return None if token is None else -scores[token]

    return _merge(_symbols(escaped), priority, vocab)


def gemma4_reference(
    text: str, vocab: Mapping[str, int], ranks: Mapping[tuple[str, str], int]
) -> list[int]:
    """One run of text as llama.cpp tokenizes a `gemma4` vocabulary: spaces escaped, runs of
    newlines cut apart (and looked up whole first), file merges by rank."""
    ids: list[int] = []
    for word in re.findall(r"[^\n]+|\n+", text.replace(" ", _SPACE)):
        if word.startswith("\n") and word in vocab:
            ids.append(vocab[word])
        else:
            ids.extend(_merge(_symbols(word), lambda left, right: ranks.get((left, right)), vocab))
    return ids
