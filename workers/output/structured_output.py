"""The grammar a response's answer must follow, as an xgrammar structural tag: the answer
constraint (JSON, a JSON schema, a regex, a choice, an EBNF grammar), function calls in the
model family's markup, or both; compiled for the model, with errors that name the request field.

    tool_choice  answer constraint  the answer is
    none/no tools  none             free text (no grammar)
    none/no tools  C                C
    auto           none             free text in which every <tool_call> block is a valid call
    auto           C                one or more calls, or C
    required       any              one or more calls (one with parallel_tool_calls false)
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import Any

from xgrammar import CompiledGrammar

from events import AnswerConstraint, RequestAccepted, ToolDefinition
from events.request import CustomInputGrammar
from workers.engine.grammar import GrammarCompiler, GrammarError
from workers.engine.grammar_budget import BudgetedGrammarCompiler, GrammarBudgetExceeded
from workers.output.custom_tool_calls import CUSTOM_CLOSE_TAG, CUSTOM_HEADER_END, CUSTOM_OPEN_TAG
from workers.output.lark_grammar import lark_to_ebnf
from workers.output.tool_call_formats import ToolCallFormat, tool_call_format
from workers.output.tool_calls import callable_tools

# At most this much whitespace in a row inside generated JSON: valid JSON either way, and
# a small model cannot loop on newlines until it runs out of tokens.
JSON_MAX_WHITESPACE = 1
ANY_OBJECT: dict[str, Any] = {"type": "object"}


class ConstraintError(ValueError):
    """The request's grammar cannot be compiled; `param` names the field at fault."""

    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.param = param


def answer_format(
    request: RequestAccepted, call_format: ToolCallFormat | None = None
) -> dict[str, Any] | None:
    """The structural tag's format for the answer, or None when the answer is free. Calls
    are written in `call_format`, the model family's markup (hermes by default)."""
    constraint = constraint_format(request.answer_constraint)
    tools = callable_tools(request)
    if not tools:
        return constraint
    call_format = call_format or tool_call_format(None)
    tags = [call_tag(tool, call_format) for tool in tools]
    only_one = not request.parallel_tool_calls
    calls = {"type": "tags_with_separator", "tags": tags, "separator": call_format.separator,
             "at_least_one": True, "stop_after_first": only_one}
    if request.tool_choice == "required":
        return calls
    if constraint is None:
        triggers = sorted({CUSTOM_OPEN_TAG if tool.kind == "custom" else call_format.trigger
                           for tool in tools})
        return {"type": "triggered_tags", "triggers": triggers, "tags": tags,
                "stop_after_first": only_one}
    return {"type": "or", "elements": [calls, constraint]}


def call_tag(tool: ToolDefinition, call_format: ToolCallFormat | None = None) -> dict[str, Any]:
    """A call in the family's markup (hermes: `<tool_call>\\n{"name": "<name>", "arguments":
    <arguments>}\\n</tool_call>`): the name is written by the grammar, the arguments follow
    the tool's schema. A custom tool's block (workers/output/custom_tool_calls.py) holds its
    input: free text, or its grammar."""
    if tool.kind == "custom":
        return {"type": "tag", "begin": f"{CUSTOM_OPEN_TAG}{tool.name}{CUSTOM_HEADER_END}",
                "content": custom_input_format(tool.input_grammar), "end": CUSTOM_CLOSE_TAG}
    call_format = call_format or tool_call_format(None)
    return {
        "type": "tag",
        "begin": call_format.call_begin(tool.name),
        "content": json_format(tool.parameters or ANY_OBJECT),
        "end": call_format.end,
    }


def custom_input_format(grammar: CustomInputGrammar | None) -> dict[str, Any]:
    if grammar is None:
        return {"type": "any_text"}
    if grammar.syntax == "regex":
        return {"type": "regex", "pattern": grammar.definition}
    return {"type": "grammar", "grammar": lark_to_ebnf(grammar.definition)}


def json_format(schema: dict[str, Any]) -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": schema, "max_whitespace_cnt": JSON_MAX_WHITESPACE}


def constraint_format(constraint: AnswerConstraint | None) -> dict[str, Any] | None:
    if constraint is None:
        return None
    if constraint.kind == "json_object":
        return json_format(ANY_OBJECT)
    if constraint.kind == "json_schema":
        return json_format(constraint.json_schema or ANY_OBJECT)
    if constraint.kind == "regex":
        return {"type": "regex", "pattern": constraint.pattern}
    if constraint.kind == "choice":
        return {"type": "or", "elements": [
            {"type": "const_string", "value": choice} for choice in constraint.choices
        ]}
    return {"type": "grammar", "grammar": constraint.grammar}


def compile_answer_grammar(
    compiler: GrammarCompiler | BudgetedGrammarCompiler, request: RequestAccepted,
    call_format: ToolCallFormat | None = None,
) -> CompiledGrammar | None:
    """The compiled grammar of the request's answer, or None when it is free."""
    try:
        fmt = answer_format(request, call_format)
        return None if fmt is None else compiler.compile(fmt)
    except GrammarBudgetExceeded as error:
        # Finding the culprit would spend the budget again, part by part.
        param = _budget_param(request)
        raise ConstraintError(f"The grammar for '{param}' {error}: make it smaller or "
                              "simpler.", param) from error
    except GrammarError as error:
        param = _culprit(compiler, request, call_format)
        raise ConstraintError(f"The grammar for '{param}' does not compile: {_clean(error)}",
                              param) from error


def _budget_param(request: RequestAccepted) -> str:
    """The field a grammar over its budget is blamed on: the answer's constraint when
    there is one (the usual heavy part), else the tools."""
    if request.answer_constraint is not None:
        return request.answer_constraint.param
    return "tools"


def _culprit(
    compiler: GrammarCompiler | BudgetedGrammarCompiler, request: RequestAccepted,
    call_format: ToolCallFormat | None,
) -> str:
    """Compiles each part alone to find the field whose grammar fails."""
    parts: list[tuple[str, Callable[[], dict[str, Any] | None]]] = [
        (tool.param, functools.partial(call_tag, tool, call_format))
        for tool in callable_tools(request)]
    if request.answer_constraint is not None:
        parts.append((request.answer_constraint.param,
                      lambda: constraint_format(request.answer_constraint)))
    for param, fmt in parts:
        try:
            built = fmt()
            if built is not None:
                compiler.compile(built)
        except GrammarError:
            return param
    return "tools" if parts and parts[0][0].startswith("tools") else "text.format"


def _clean(error: Exception) -> str:
    """xgrammar's messages start with a time and a source location; the reason follows."""
    return re.sub(r"^\[[\d:]+\] \S+:\d+: ", "", str(error)).strip()
