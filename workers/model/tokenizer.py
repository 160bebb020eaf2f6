"""Tokenizer: the `tokenizers` backend plus the special ids the engine stops on."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence

import tokenizers

# End-of-turn markers of common chat formats. A chat model whose template closes turns
# with one of these stops there, even when its config names a different eos.
TURN_END_MARKERS = ("<|im_end|>", "<|eot_id|>", "<|end|>", "<end_of_turn>", "<|eom_id|>")
HARMONY_TURN_ENDS = ("<|return|>", "<|call|>")


class Tokenizer:
    def __init__(
        self,
        backend: tokenizers.Tokenizer,
        eos_token_ids: Iterable[int],
        bos_token_id: int | None = None,
    ):
        self.backend = backend
        # `encode_special_tokens` is a setting of the backend, not of one call: encodes take
        # turns so that one asking for literal specials cannot change another's result.
        self._encode_lock = threading.Lock()
        self.bos_token_id = bos_token_id
        self.eos_token_ids: tuple[int, ...] = tuple(dict.fromkeys(eos_token_ids))
        if not self.eos_token_ids:
            raise ValueError("a tokenizer needs at least one eos token id")
        self.vocab_size = backend.get_vocab_size(with_added_tokens=True)
        self._blank_token_ids: frozenset[int] | None = None
        for token_id in (
            *self.eos_token_ids,
            *([bos_token_id] if bos_token_id is not None else []),
        ):
            if not 0 <= token_id < self.vocab_size:
                raise ValueError(f"special token id {token_id} is outside the vocabulary")

    def encode(
        self, text: str, add_bos_token: bool = False, parse_special: bool = True
    ) -> list[int]:
        """Token ids of `text`; special tokens written in the text become their single ids,
        or, with `parse_special=False`, are tokenized as the text they are spelled with
        (user-defined tokens such as `<think>` stay whole either way, as in llama.cpp).

        The backend's post-processor is bypassed: chat templates write BOS themselves, so
        adding it here too would double it.
        """
        with self._encode_lock:
            setting = self.backend.encode_special_tokens
            self.backend.encode_special_tokens = not parse_special
            try:
                ids = self.backend.encode(text, add_special_tokens=False).ids
            finally:
                self.backend.encode_special_tokens = setting
        if add_bos_token:
            if self.bos_token_id is None:
                raise ValueError("this tokenizer has no BOS token")
            ids.insert(0, self.bos_token_id)
        return ids

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        return self.backend.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def token_text(self, token_id: int) -> str:
        """The text one token adds inside a text (for logprobs). Decoded alone, a
        SentencePiece token's leading `▁` would be taken for the start of text and dropped,
        so the token is decoded after an anchor (the eos token, always whole) and the
        anchor's text is cut off."""
        anchor = self.eos_token_ids[0]
        before = self.backend.decode([anchor], skip_special_tokens=False)
        text = self.backend.decode([anchor, token_id], skip_special_tokens=False)
        return text[len(before) :] if text.startswith(before) else text

    def blank_token_ids(self) -> frozenset[int]:
        """Tokens whose text alone is whitespace or nothing (a newline, a run of spaces, a
        byte of a character split across tokens counts as text); computed once, a batched
        decode of the vocabulary (a tenth of a second at 49k tokens)."""
        if self._blank_token_ids is None:
            texts = self.backend.decode_batch(
                [[token_id] for token_id in range(self.vocab_size)], skip_special_tokens=False
            )
            self._blank_token_ids = frozenset(
                token_id for token_id, text in enumerate(texts) if not text.strip()
            )
        return self._blank_token_ids

    def token_to_id(self, token: str) -> int | None:
        return self.backend.token_to_id(token)

    def id_to_token(self, token_id: int) -> str | None:
        return self.backend.id_to_token(token_id)

    def get_vocab(self) -> dict[str, int]:
        return self.backend.get_vocab(with_added_tokens=True)


def chat_eos_token_ids(
    backend: tokenizers.Tokenizer, eos_token_ids: Iterable[int], chat_template: str | None
) -> list[int]:
    """The configured eos ids plus the end-of-turn marker the chat template writes, if any.
    Harmony's `<|end|>` ends one message of a turn (the reasoning before the answer), not
    the turn: there `<|return|>` (the answer) and `<|call|>` (a tool call) end it."""
    ids = list(eos_token_ids)
    if chat_template and "<|channel|>" in chat_template:
        for marker in HARMONY_TURN_ENDS:
            token_id = backend.token_to_id(marker)
            if token_id is not None:
                ids.append(token_id)
        return list(dict.fromkeys(ids))
    if chat_template:
        for marker in TURN_END_MARKERS:
            token_id = backend.token_to_id(marker)
            if token_id is not None and marker in chat_template:
                ids.append(token_id)
    return list(dict.fromkeys(ids))
