"""The limits table: declared once (api/guards/limits.py), rendered into docs/api.md, and each
bound refused one past it, with a 400 naming the request field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from api.errors import APIError
from api.guards.limits import (
    CHOICES,
    ENUM_VALUES,
    GRAMMAR_CHARS,
    METADATA_VALUE_CHARS,
    SCHEMA_BYTES,
    STOP_STRING_CHARS,
    STOP_STRINGS,
    TOOLS,
    check_limits,
    limits_table,
)
from api.lowering.accept import accept
from api.schema.request import ResponsesRequest

ROOT = Path(__file__).resolve().parents[2]


def event_of(**fields: Any) -> Any:
    request = ResponsesRequest.model_validate({"model": "m", "input": "hi", **fields})
    return accept(request, "resp_limits", owner="shared")


def tool(name: str, parameters: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"type": "function", "name": name,
            "parameters": parameters or {"type": "object", "properties": {}}}


def test_the_doc_shows_the_declared_table() -> None:
    assert limits_table() in (ROOT / "docs" / "api.md").read_text()


def enum_schema(count: int) -> dict[str, Any]:
    return {"type": "object", "properties": {"x": {"enum": [str(n) for n in range(count)]}}}


CASES = [
    (STOP_STRINGS, lambda n: {"stop": [f"s{i}" for i in range(n)]}, "stop"),
    (STOP_STRING_CHARS, lambda n: {"stop": ["x" * n]}, "stop[0]"),
    (TOOLS, lambda n: {"tools": [tool(f"f{i}") for i in range(n)]}, "tools"),
    (ENUM_VALUES, lambda n: {"tools": [tool("f", enum_schema(n))]}, "tools[0].parameters"),
    (CHOICES, lambda n: {"structured_outputs": {"choice": [f"c{i}" for i in range(n)]}},
     "structured_outputs.choice"),
    (GRAMMAR_CHARS, lambda n: {"structured_outputs": {
        "grammar": 'root ::= "a"' + " " * (n - len('root ::= "a"'))}}, "structured_outputs.grammar"),
    (METADATA_VALUE_CHARS, lambda n: {"metadata": {"k": "v" * n}}, "metadata.k"),
]


@pytest.mark.parametrize(("limit", "body", "param"), CASES, ids=[c[0].field for c in CASES])
def test_each_bound_holds_and_is_refused_one_past_it(limit: Any, body: Any, param: str) -> None:
    check_limits(event_of(**body(limit.bound)))
    with pytest.raises(APIError) as refused:
        check_limits(event_of(**body(limit.bound + 1)))
    assert refused.value.status == 400 and refused.value.param == param


def test_a_schema_past_its_size_is_refused() -> None:
    big = {"type": "object", "description": "x" * SCHEMA_BYTES.bound}
    with pytest.raises(APIError) as refused:
        check_limits(event_of(text={"format": {"type": "json_schema", "name": "big",
                                               "schema": big}}))
    assert refused.value.param == "text.format.schema"
