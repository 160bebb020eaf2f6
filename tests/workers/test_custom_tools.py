"""Custom tools on the worker: their blocks parsed out of the answer whatever pieces the
text arrives in, their grammars (free text, regex, Lark) compiled for the default model's
vocabulary and checked on inputs they must take and refuse, and a Lark grammar that
cannot be held named by its field."""

from __future__ import annotations

from typing import Any

import pytest
import xgrammar as xgr

from events import ChatMessage, RequestAccepted, ToolDefinition
from events.request import CustomInputGrammar
from workers.engine.grammar import GrammarCompiler, GrammarError
from workers.output.custom_tool_calls import custom_block
from workers.output.lark_grammar import lark_to_ebnf
from workers.output.structured_output import ConstraintError, compile_answer_grammar
from workers.output.tool_calls import (
    ArgumentsDelta,
    CallEnded,
    CallStarted,
    MessageText,
    ToolCallParser,
)

PATCH_GRAMMAR = r"""
start: begin_patch hunk+ end_patch
begin_patch: "*** Begin Patch" LF
end_patch: "*** End Patch" LF?
hunk: add_hunk | delete_hunk
add_hunk: "*** Add File: " filename LF add_line+
delete_hunk: "*** Delete File: " filename LF
filename: /(.+)/
add_line: "+" /(.*)/ LF -> line
%import common.LF
"""
PATCH = "*** Begin Patch\n*** Add File: notes.txt\n+hi\n*** End Patch\n"


def custom(name: str, syntax: str | None = None, definition: str = "") -> ToolDefinition:
    grammar = CustomInputGrammar(syntax=syntax, definition=definition) if syntax else None
    return ToolDefinition(name=name, kind="custom", input_grammar=grammar, param="tools[0].format")


def request(*tools: ToolDefinition, **fields: Any) -> RequestAccepted:
    return RequestAccepted(response_id="resp_t", seq=0, model="m", tools=tools,
                           messages=(ChatMessage(role="user", content="hi"),), **fields)


@pytest.fixture(scope="module")
def compiler(checkpoint) -> GrammarCompiler:
    return GrammarCompiler(checkpoint.tokenizer, checkpoint.config.vocab_size)


def accepts(compiler: GrammarCompiler, req: RequestAccepted, text: str) -> bool:
    matcher = xgr.GrammarMatcher(compile_answer_grammar(compiler, req))
    return matcher.accept_string(text) and matcher.is_completed()


@pytest.mark.parametrize("step", [1, 2, 5, 1000])
def test_a_custom_block_parses_the_same_in_any_pieces(step: int) -> None:
    text = f"Patching.\n{custom_block('apply_patch', PATCH)}\nDone."
    parser = ToolCallParser()
    pieces = [piece for start in range(0, len(text), step) for piece in parser.feed(text[start:start + step])]
    pieces += parser.finish()
    assert [piece for piece in pieces if isinstance(piece, CallStarted)] == [CallStarted(0, "apply_patch")]
    assert "".join(p.text for p in pieces if isinstance(p, ArgumentsDelta)) == PATCH
    assert [p for p in pieces if isinstance(p, CallEnded)] == [CallEnded(0, PATCH)]
    assert "".join(p.text for p in pieces if isinstance(p, MessageText)) == "Patching.Done."


def test_a_cut_custom_block_keeps_what_it_has() -> None:
    parser = ToolCallParser()
    pieces = parser.feed(custom_block("apply_patch", PATCH)[:-12]) + parser.finish()
    assert isinstance(pieces[0], CallStarted) and isinstance(pieces[-1], CallEnded)
    assert PATCH.startswith(pieces[-1].arguments)


def test_free_text_and_regex_inputs(compiler) -> None:
    free = request(custom("notes"), tool_choice="required")
    assert accepts(compiler, free, custom_block("notes", "anything at all\nover lines"))
    regex = request(custom("calc", "regex", r"[0-9]+ [+*] [0-9]+"), tool_choice="required")
    assert accepts(compiler, regex, custom_block("calc", "12 * 7"))
    assert not accepts(compiler, regex, custom_block("calc", "twelve times seven"))


def test_a_lark_grammar_holds_the_input(compiler) -> None:
    req = request(custom("apply_patch", "lark", PATCH_GRAMMAR), tool_choice="required")
    assert accepts(compiler, req, custom_block("apply_patch", PATCH))
    assert not accepts(compiler, req, custom_block("apply_patch", "rm -rf /\n"))
    # In Lark a `.` stops at a newline: a file name cannot run onto the next line.
    assert not accepts(compiler, req, custom_block(
        "apply_patch", PATCH.replace("notes.txt", "notes\n.txt")))


def test_auto_lets_the_model_answer_or_call(compiler) -> None:
    req = request(custom("calc", "regex", r"[0-9]+"), tool_choice="auto")
    assert accepts(compiler, req, "No call needed.")
    assert accepts(compiler, req, f"Let me compute.\n{custom_block('calc', '84')}")


def test_ignored_terminals_may_come_between_symbols() -> None:
    ebnf = lark_to_ebnf('start: WORD ("," WORD)*\n%import common.WORD\n%ignore " "')
    grammar = xgr.Grammar.from_ebnf(ebnf)
    assert xgr.testing._is_grammar_accept_string(grammar, "a , b,c")


@pytest.mark.parametrize("definition", ['start: "select"i', "start: (", "start: missing_rule"])
def test_a_grammar_that_cannot_be_held_names_the_field(compiler, definition: str) -> None:
    with pytest.raises(GrammarError):
        compiler.compile({"type": "grammar", "grammar": lark_to_ebnf(definition)})
    with pytest.raises(ConstraintError) as refused:
        compile_answer_grammar(compiler, request(custom("q", "lark", definition),
                                                 tool_choice="required"))
    assert refused.value.param == "tools[0].format"
