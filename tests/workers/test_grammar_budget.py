"""Grammar compilation under a time and memory budget, in a real child process, for the
default model's vocabulary: a grammar within it compiles to the same grammar as in
process; one past it ends at the budget with a clear error, and the next one compiles."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import xgrammar as xgr

from events import AnswerConstraint, ChatMessage, RequestAccepted
from workers.engine.grammar import GrammarCompiler, GrammarError
from workers.engine.grammar_budget import (
    BudgetedGrammarCompiler,
    GrammarBudgetExceeded,
    _resident_bytes,
)
from workers.output.structured_output import ConstraintError, compile_answer_grammar
from workers.settings import WorkerSettings

TIMEOUT_S = 2.0


@pytest.fixture(scope="module")
def budgeted(checkpoint) -> Iterator[BudgetedGrammarCompiler]:  # type: ignore[no-untyped-def]
    local = GrammarCompiler(checkpoint.tokenizer, checkpoint.config.vocab_size)
    compiler = BudgetedGrammarCompiler(local.tokenizer_info, local.vocab_size,
                                       timeout_s=TIMEOUT_S, memory_bytes=4 * 2**30)
    compiler.start()
    try:
        yield compiler
    finally:
        compiler.close()


def request(constraint: AnswerConstraint) -> RequestAccepted:
    return RequestAccepted(response_id="resp_t", seq=0, model="m",
                           messages=(ChatMessage(role="user", content="hi"),),
                           answer_constraint=constraint)


def test_a_grammar_within_budget_compiles_and_matches(budgeted: BudgetedGrammarCompiler) -> None:
    constraint = AnswerConstraint(kind="choice", choices=("yes", "no"), param="structured_outputs.choice")
    matcher = xgr.GrammarMatcher(compile_answer_grammar(budgeted, request(constraint)))
    assert matcher.accept_string("yes") and matcher.is_completed()
    with pytest.raises(GrammarError):
        budgeted.compile({"type": "regex", "pattern": "(unclosed"})
    # The default memory budget leaves room for what an idle compiler holds.
    assert budgeted._child is not None
    idle = _resident_bytes(budgeted._child.process.pid)
    assert 0 < idle < WorkerSettings().grammar_memory_bytes / 2


def test_a_grammar_past_its_time_budget_fails_clearly(budgeted: BudgetedGrammarCompiler) -> None:
    # Thousands of long choices: far more than the budget allows on any machine.
    slow = AnswerConstraint(kind="choice", param="structured_outputs.choice",
                            choices=tuple(f"choice number {n} " * 20 for n in range(20_000)))
    started = time.monotonic()
    with pytest.raises(ConstraintError) as failed:
        compile_answer_grammar(budgeted, request(slow))
    assert time.monotonic() - started < TIMEOUT_S + 5
    assert failed.value.param == "structured_outputs.choice"
    assert "budget" in str(failed.value)
    # The killed child is replaced: the next grammar compiles.
    small = AnswerConstraint(kind="regex", pattern="[0-9]+", param="structured_outputs.regex")
    assert compile_answer_grammar(budgeted, request(small)) is not None


def test_a_grammar_past_its_memory_budget_fails_clearly(checkpoint) -> None:  # type: ignore[no-untyped-def]
    """SPATE_GRAMMAR_MEMORY_BYTES, here one byte: the child is stopped at the budget."""
    local = GrammarCompiler(checkpoint.tokenizer, checkpoint.config.vocab_size)
    tight = BudgetedGrammarCompiler(local.tokenizer_info, local.vocab_size,
                                    timeout_s=60, memory_bytes=1)  # below any process
    try:
        with pytest.raises(GrammarBudgetExceeded, match="MiB"):
            tight.compile({"type": "regex", "pattern": "[a-z]+"})
    finally:
        tight.close()
