"""The answer's grammar for each tool choice and answer constraint, compiled for the default
model's vocabulary and checked on strings it must accept and refuse."""

from __future__ import annotations

from typing import Any

import pytest
import xgrammar as xgr

from events import AnswerConstraint, ChatMessage, RequestAccepted, ToolDefinition
from workers.engine.grammar import GrammarCompiler
from workers.output.structured_output import ConstraintError, answer_format, compile_answer_grammar

WEATHER = ToolDefinition(
    name="get_weather", param="tools[0].parameters",
    parameters={"type": "object", "properties": {"city": {"type": "string"}},
                "required": ["city"], "additionalProperties": False},
)
CLOCK = ToolDefinition(name="clock.now", namespace="clock", param="tools[1].tools[0].parameters")
PARIS = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
NOW = '<tool_call>\n{"name": "clock.now", "arguments": {}}\n</tool_call>'
JSON_ANSWER = AnswerConstraint(kind="json_schema", param="text.format.schema", json_schema={
    "type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"],
})


@pytest.fixture(scope="module")
def compiler(checkpoint) -> GrammarCompiler:
    return GrammarCompiler(checkpoint.tokenizer, checkpoint.config.vocab_size)


def request(**fields: Any) -> RequestAccepted:
    return RequestAccepted(response_id="resp_t", seq=0, model="m",
                           messages=(ChatMessage(role="user", content="hi"),), **fields)


def accepts(compiler: GrammarCompiler, req: RequestAccepted, text: str) -> bool:
    matcher = xgr.GrammarMatcher(compile_answer_grammar(compiler, req))
    return matcher.accept_string(text) and matcher.is_completed()


def test_required_allows_calls_only(compiler) -> None:
    req = request(tools=(WEATHER, CLOCK), tool_choice="required")
    assert accepts(compiler, req, PARIS)
    assert accepts(compiler, req, f"{PARIS}\n{NOW}")
    assert not accepts(compiler, req, "It is sunny.")
    assert not accepts(compiler, req, PARIS.replace('"city"', '"town"'))
    assert not accepts(compiler, req, "")


def test_one_call_without_parallel_calls_and_only_allowed_names(compiler) -> None:
    single = request(tools=(WEATHER, CLOCK), tool_choice="required", parallel_tool_calls=False)
    assert accepts(compiler, single, PARIS)
    assert not accepts(compiler, single, f"{PARIS}\n{NOW}")
    named = request(tools=(WEATHER, CLOCK), tool_choice="required", allowed_tool_names=("clock.now",))
    assert accepts(compiler, named, NOW)
    assert not accepts(compiler, named, PARIS)


def test_auto_allows_text_and_valid_calls(compiler) -> None:
    req = request(tools=(WEATHER,), tool_choice="auto")
    assert accepts(compiler, req, "It is sunny.")
    assert accepts(compiler, req, f"Let me look.\n{PARIS}")
    assert not accepts(compiler, req, PARIS.replace("Paris", '1"'))


def test_auto_with_an_answer_constraint_is_calls_or_the_answer(compiler) -> None:
    req = request(tools=(WEATHER,), answer_constraint=JSON_ANSWER)
    assert accepts(compiler, req, PARIS)
    assert accepts(compiler, req, '{"ok": true}')
    assert not accepts(compiler, req, "It is sunny.")


def test_no_grammar_without_tools_or_constraint(compiler) -> None:
    assert answer_format(request()) is None
    assert answer_format(request(tools=(WEATHER,), tool_choice="none")) is None
    none_with_json = request(tools=(WEATHER,), tool_choice="none", answer_constraint=JSON_ANSWER)
    assert accepts(compiler, none_with_json, '{"ok": false}')
    assert not accepts(compiler, none_with_json, PARIS)


@pytest.mark.parametrize(("constraint", "good", "bad"), [
    (AnswerConstraint(kind="json_object", param="text.format"), '{"any": [1, null]}', "[1]"),
    (AnswerConstraint(kind="regex", pattern=r"[a-c]{2}\d", param="p"), "ab7", "abc"),
    (AnswerConstraint(kind="choice", choices=("left", "right"), param="p"), "right", "up"),
    (AnswerConstraint(kind="grammar", grammar='root ::= "a" ("b" | "c")+', param="p"), "abcb", "ad"),
])
def test_answer_constraints(compiler, constraint, good, bad) -> None:
    req = request(answer_constraint=constraint)
    assert accepts(compiler, req, good)
    assert not accepts(compiler, req, bad)


def test_a_grammar_that_does_not_compile_names_its_field(compiler) -> None:
    bad_regex = request(answer_constraint=AnswerConstraint(kind="regex", pattern="(a",
                                                           param="structured_outputs.regex"))
    with pytest.raises(ConstraintError) as caught:
        compile_answer_grammar(compiler, bad_regex)
    assert caught.value.param == "structured_outputs.regex"
    assert not str(caught.value).split(": ", 1)[1].startswith("[")
    broken = CLOCK.model_copy(update={"parameters": {"type": "object", "properties": {"t": {"type": "nope"}}}})
    with pytest.raises(ConstraintError) as caught:
        compile_answer_grammar(compiler, request(tools=(WEATHER, broken), tool_choice="required"))
    assert caught.value.param == "tools[1].tools[0].parameters"
