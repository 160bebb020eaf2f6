"""IncrementalDetokenizer: turns a growing list of token ids into text deltas safe to stream."""

from __future__ import annotations

from collections.abc import Sequence

from workers.model.tokenizer import Tokenizer

_REPLACEMENT = "\ufffd"
# Prompt tokens decoded ahead of the first output token: enough for a decoder that treats
# the start of text specially (a sentencepiece leading space) to see the real context.
_PROMPT_CONTEXT_TOKENS = 6


class IncrementalDetokenizer:
    """One per sequence. `push(token_id)` returns the text that token completes, maybe "".

    It decodes a short window, from the token before the last emitted one to the end, and
    emits what the window adds beyond its already-emitted part. A window whose text ends in
    U+FFFD stops at a partial UTF-8 character, so it is held until later tokens complete
    it (or `flush()` gives up on it). For byte-level tokenizers the deltas concatenate to
    exactly `decode(all pushed ids)`.
    """

    __slots__ = (
        "_tokenizer",
        "_skip_special_tokens",
        "_ids",
        "_prefix_offset",
        "_read_offset",
        "_first_output",
    )

    def __init__(
        self,
        tokenizer: Tokenizer,
        skip_special_tokens: bool = True,
        prompt_token_ids: Sequence[int] = (),
    ):
        self._tokenizer = tokenizer
        self._skip_special_tokens = skip_special_tokens
        # With prompt context the window starts inside the prompt; none of it is emitted.
        self._ids = list(prompt_token_ids[-_PROMPT_CONTEXT_TOKENS:])
        self._first_output = len(self._ids)
        self._prefix_offset = 0
        self._read_offset = len(self._ids)

    @property
    def output_token_ids(self) -> list[int]:
        return self._ids[self._first_output :]

    def _decode(self, start: int, end: int | None = None) -> str:
        return self._tokenizer.decode(self._ids[start:end], self._skip_special_tokens)

    def push(self, token_id: int) -> str:
        self._ids.append(token_id)
        prefix_text = self._decode(self._prefix_offset, self._read_offset)
        new_text = self._decode(self._prefix_offset)
        if len(new_text) <= len(prefix_text) or new_text.endswith(_REPLACEMENT):
            # Nothing visible yet (a skipped special) or a character still incomplete.
            return ""
        self._prefix_offset = self._read_offset
        self._read_offset = len(self._ids)
        return new_text[len(prefix_text) :]

    def flush(self) -> str:
        """Whatever is held back, replacement characters included; call once at the end."""
        prefix_text = self._decode(self._prefix_offset, self._read_offset)
        new_text = self._decode(self._prefix_offset)
        self._prefix_offset = self._read_offset = len(self._ids)
        return new_text[len(prefix_text) :]
