"""Prompt-lookup drafting: the tokens that followed the latest earlier occurrence of a
sequence's last few tokens, in its own prompt or output, guessed to follow again.

No draft model: quoting, editing a given text, JSON and tool arguments repeat long runs
of their context, and where they do the guess is right; where it is wrong, verification
throws it away (workers/engine/speculation.py).
"""

from __future__ import annotations


class NgramIndex:
    """Where each n-gram of a sequence last ended, kept up to date incrementally: a lookup
    costs a dict read per n, not a scan of the context."""

    __slots__ = ("min_ngram", "max_ngram", "last_end", "num_indexed")

    def __init__(self, min_ngram: int, max_ngram: int) -> None:
        self.min_ngram = min_ngram
        self.max_ngram = max_ngram
        # (n-gram) -> the index of its last token, latest occurrence first found.
        self.last_end: dict[tuple[int, ...], int] = {}
        # Tokens whose n-grams ending there are in `last_end`.
        self.num_indexed = 0

    def propose(self, token_ids: list[int], max_tokens: int) -> list[int]:
        """Up to `max_tokens` tokens that followed the latest earlier occurrence of the
        longest suffix of `token_ids` (max_ngram tokens down to min_ngram) seen before;
        empty when none was."""
        if max_tokens < 1:
            return []
        # Every n-gram ending before the last token: the suffix itself is never its own match.
        self._index_through(token_ids, len(token_ids) - 1)
        for n in range(min(self.max_ngram, len(token_ids)), self.min_ngram - 1, -1):
            end = self.last_end.get(tuple(token_ids[-n:]))
            if end is not None:
                return token_ids[end + 1 : end + 1 + max_tokens]
        return []

    def _index_through(self, token_ids: list[int], count: int) -> None:
        last_end = self.last_end
        for end in range(self.num_indexed, count):
            for n in range(self.min_ngram, min(self.max_ngram, end + 1) + 1):
                last_end[tuple(token_ids[end - n + 1 : end + 1])] = end
        self.num_indexed = max(self.num_indexed, count)
