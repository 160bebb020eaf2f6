"""Constrained decoding with xgrammar: grammars compiled for one vocabulary, when a
constrained sequence's grammar (its matcher, workers/engine/answer_grammar.py) picks its
next token, and the token bitmask that keeps each constrained row on its grammar.

xgrammar is the grammar library vLLM and SGLang use: it precomputes, per grammar state, which
tokens of a byte-level vocabulary may come next, fills a compact bitmask on the CPU, and applies
it to the logits in place on CPU and CUDA alike. The constraint covers the answer only: a row
inside a think block, or one whose next token the thinking budget forces, is left alone, except
that it may not end the sequence while its grammar still needs an answer (see `holds_open`).
"""

from __future__ import annotations

import json
from typing import Any

import torch
import xgrammar as xgr

from workers.engine.sequence import Sequence
from workers.model.tokenizer import Tokenizer

# Compiled grammars kept for reuse across requests (xgrammar's own cache, keyed by source).
GRAMMAR_CACHE_BYTES = 256 * 1024 * 1024


class GrammarError(ValueError):
    """A grammar, schema or pattern that xgrammar cannot compile."""


class GrammarCompiler:
    """Compiles structural tags (xgrammar's JSON format for mixed text, tags, JSON schemas,
    regexes and EBNF) against one tokenizer. Thread-safe; the worker compiles off its event
    loop while the engine thread matches."""

    def __init__(self, tokenizer: Tokenizer, vocab_size: int, max_threads: int = 4) -> None:
        # Imported here: transformers is heavy, and only the vocabulary detection needs it.
        from transformers import PreTrainedTokenizerFast

        # The model's vocabulary may be padded past the tokenizer's; the bitmask must span
        # every logit, so the info is sized by the model.
        self.vocab_size = vocab_size
        self.tokenizer_info = xgr.TokenizerInfo.from_huggingface(
            PreTrainedTokenizerFast(tokenizer_object=tokenizer.backend),
            vocab_size=vocab_size,
            stop_token_ids=list(tokenizer.eos_token_ids),
        )
        self._compiler = xgr.GrammarCompiler(
            self.tokenizer_info, max_threads=max_threads, cache_enabled=True,
            cache_limit_bytes=GRAMMAR_CACHE_BYTES,
        )

    def compile(self, structural_tag: dict[str, Any]) -> xgr.CompiledGrammar:
        # Key order is kept: a JSON schema lists its properties in the order they are written.
        source = json.dumps({"type": "structural_tag", "format": structural_tag})
        try:
            return self._compiler.compile_structural_tag(source)
        except (RuntimeError, ValueError) as error:
            raise GrammarError(str(error)) from error


def picks_next_token(seq: Sequence, forced_token_id: int | None) -> bool:
    """Whether the sequence's grammar constrains its next token: it has one, it is answering
    (not thinking), and no forced token (the budget's end marker) takes precedence."""
    return (
        seq.grammar is not None
        and forced_token_id is None
        and not seq.think.in_block
        and not seq.grammar.terminated
    )


def holds_open(seq: Sequence, forced_token_id: int | None) -> bool:
    """Whether the sequence must not end at its next token: it is inside a think block, and the
    answer still to come has a grammar that what it holds so far (nothing, at first) does not
    satisfy. Ending there would drop the promised answer, whatever the model wants, so the block
    has to close through its end marker (written by the model, or forced by the budget) and the
    grammar then shapes the answer. An answer the grammar lets be empty (tool_choice "auto"
    without a constraint, a regex matching "") leaves the row free."""
    return (
        seq.grammar is not None
        and forced_token_id is None
        and seq.think.in_block
        and not seq.grammar.satisfied
    )


def advance(seq: Sequence, token_id: int, forced_token_id: int | None) -> bool:
    """Feeds a token the sequence just produced to its grammar, if the grammar chose it.
    Call before the think state sees the token. True when the grammar has terminated."""
    grammar = seq.grammar
    if grammar is None or not picks_next_token(seq, forced_token_id):
        return False
    grammar.accept(token_id)
    return grammar.terminated


class GrammarMasks:
    """Sets the logits of every token a constrained row's grammar forbids to -inf, and of the
    ending tokens of rows that `holds_open`."""

    def __init__(self, vocab_size: int, eos_token_ids: tuple[int, ...] = ()) -> None:
        self.vocab_size = vocab_size
        self.eos_token_ids = frozenset(eos_token_ids)
        self._bitmask = xgr.allocate_token_bitmask(1, vocab_size)

    def forbid_ending(self, logits: torch.Tensor, seqs: list[Sequence], rows: list[int]) -> None:
        rows_and_ids = [
            (row, token_id)
            for row in rows
            for token_id in seqs[row].params.ending_token_ids(self.eos_token_ids)
        ]
        if rows_and_ids:
            index = torch.tensor(rows_and_ids, dtype=torch.int64, device=logits.device)
            logits[index[:, 0], index[:, 1]] = float("-inf")

    def apply(self, logits: torch.Tensor, seqs: list[Sequence], rows: list[int]) -> None:
        if self._bitmask.shape[0] < len(seqs):
            self._bitmask = xgr.allocate_token_bitmask(len(seqs), self.vocab_size)
        bitmask = self._bitmask[: len(seqs)]
        # A grammar state that allows every token needs no masking.
        masked = [
            row for row in rows
            if (grammar := seqs[row].grammar) is not None
            and grammar.matcher.fill_next_token_bitmask(bitmask, row)
        ]
        if not masked:
            return
        xgr.apply_token_bitmask_inplace(
            logits, bitmask.to(logits.device, non_blocking=True), vocab_size=self.vocab_size,
            indices=masked,
        )
