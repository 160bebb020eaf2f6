"""One sequence's place in the grammar its answer must match: the state a `Sequence`
holds, kept below it so the sequence never imports the grammar code that reads it
(workers/engine/grammar.py)."""

from __future__ import annotations

import xgrammar as xgr


class AnswerGrammar:
    """One sequence's place in its grammar."""

    __slots__ = ("matcher",)

    def __init__(self, compiled: xgr.CompiledGrammar) -> None:
        self.matcher = xgr.GrammarMatcher(compiled)

    def accept(self, token_id: int) -> None:
        if not self.matcher.accept_token(token_id):
            # The mask allowed only grammatical tokens, so this is a bug, not bad input.
            raise RuntimeError(f"token {token_id} was sampled outside its grammar")

    @property
    def terminated(self) -> bool:
        return self.matcher.is_terminated()

    @property
    def satisfied(self) -> bool:
        """What the answer holds so far already matches: ending here keeps the constraint."""
        return self.matcher.is_completed()
