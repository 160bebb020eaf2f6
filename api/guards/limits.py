"""Counts and sizes of what a request may hand the worker: stop strings, tools, schemas,
choices, patterns, grammars, metadata. Each costs every request of the batch (stop
strings are scanned at every emitted chunk) or the worker's grammar compiler, so none is
left unbounded. The bounds are declared once here; docs/api.md's limits table is
rendered from LIMITS, and the checks read the same entries.

They are checked on the lowered request event, before it is published, so every way a
request can name a list (a function tool or one inside a namespace, `text.format` or
`structured_outputs`) meets the same bound, and the error names the request field."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from api.errors import APIError
from events import RequestAccepted


@dataclass(frozen=True, slots=True)
class Limit:
    field: str
    bound: int
    unit: str
    why: str


STOP_STRINGS = Limit("stop", 32, "strings", "each is looked for in every chunk of output")
STOP_STRING_CHARS = Limit("stop[i]", 256, "characters", "the longest tail kept to find one")
TOOLS = Limit("tools", 128, "functions (namespaces counted by their functions)",
              "each is in the prompt and the call grammar")
SCHEMA_BYTES = Limit("a JSON schema (tools[i].parameters, text.format.schema, "
                     "structured_outputs.json)", 64 * 1024, "bytes as JSON",
                     "compiled into a grammar for the answer")
ENUM_VALUES = Limit("an `enum` in a schema", 256, "values", "one grammar branch each")
CHOICES = Limit("structured_outputs.choice", 256, "choices", "one grammar branch each")
CHOICE_CHARS = Limit("structured_outputs.choice[i]", 1024, "characters", "grammar size")
PATTERN_CHARS = Limit("structured_outputs.regex, a custom tool's regex format", 4096, "characters",
                      "compiled into an automaton")
GRAMMAR_CHARS = Limit("structured_outputs.grammar, a custom tool's Lark format", 64 * 1024, "characters",
                      "compiled for the vocabulary")
METADATA_PAIRS = Limit("metadata", 16, "pairs", "echoed and stored with the response")
METADATA_KEY_CHARS = Limit("metadata keys", 64, "characters", "as OpenAI's API")
METADATA_VALUE_CHARS = Limit("metadata values", 512, "characters", "as OpenAI's API")

LIMITS = (STOP_STRINGS, STOP_STRING_CHARS, TOOLS, SCHEMA_BYTES, ENUM_VALUES, CHOICES,
          CHOICE_CHARS, PATTERN_CHARS, GRAMMAR_CHARS, METADATA_PAIRS, METADATA_KEY_CHARS,
          METADATA_VALUE_CHARS)


def limits_table() -> str:
    """LIMITS as the markdown table docs/api.md shows."""
    rows = "".join(f"| {limit.field} | {limit.bound} {limit.unit} | {limit.why} |\n"
                   for limit in LIMITS)
    return "| what | at most | why |\n|---|---|---|\n" + rows


def check_limits(event: RequestAccepted) -> None:
    """A 400 naming the request field of the first count or size past its bound."""
    _bounded(len(event.sampling.stop), STOP_STRINGS, "stop")
    for index, stop in enumerate(event.sampling.stop):
        _bounded(len(stop), STOP_STRING_CHARS, f"stop[{index}]")
    _bounded(len(event.tools), TOOLS, "tools")
    for tool in event.tools:
        if tool.parameters is not None:
            _check_schema(tool.parameters, tool.param)
        if tool.input_grammar is not None:
            limit = PATTERN_CHARS if tool.input_grammar.syntax == "regex" else GRAMMAR_CHARS
            _bounded(len(tool.input_grammar.definition), limit, tool.param)
    constraint = event.answer_constraint
    if constraint is not None:
        if constraint.json_schema is not None:
            _check_schema(constraint.json_schema, constraint.param)
        _bounded(len(constraint.choices), CHOICES, constraint.param)
        for index, choice in enumerate(constraint.choices):
            _bounded(len(choice), CHOICE_CHARS, f"{constraint.param}[{index}]")
        _bounded(len(constraint.pattern or ""), PATTERN_CHARS, constraint.param)
        _bounded(len(constraint.grammar or ""), GRAMMAR_CHARS, constraint.param)
    metadata = event.echo.get("metadata") or {}
    _bounded(len(metadata), METADATA_PAIRS, "metadata")
    for key, value in metadata.items():
        _bounded(len(key), METADATA_KEY_CHARS, "metadata")
        _bounded(len(value), METADATA_VALUE_CHARS, f"metadata.{key}")


def _check_schema(schema: dict[str, Any], param: str) -> None:
    _bounded(len(json.dumps(schema, separators=(",", ":"))), SCHEMA_BYTES, param)
    for enum in _enums(schema):
        _bounded(len(enum), ENUM_VALUES, param)


def _enums(node: Any) -> Iterator[list[Any]]:
    """Every `enum` list in a schema (iterative: the body's depth is bounded already)."""
    stack = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, dict):
            if isinstance(current.get("enum"), list):
                yield current["enum"]
            stack.extend(current.values())
        elif isinstance(current, list):
            stack.extend(current)


def _bounded(size: int, limit: Limit, param: str) -> None:
    if size > limit.bound:
        raise APIError(400, f"Invalid value for '{param}': {limit.field} holds at most "
                       f"{limit.bound} {limit.unit}, and this has {size}.", param=param,
                       code="invalid_value")
