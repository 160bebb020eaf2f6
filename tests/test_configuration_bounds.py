"""Every bound in the configuration table has a test: a setting that limits a size, a
count, a length, a time or a queue is named in some test file other than this one (as
its environment variable, or as its settings field given a value: `max_waiting=`), so a
new bound documented without a test fails the suite.

The tables are read by `configuration_rows()` alone, from docs/configuration.md (which
`python -m cli.configuration_doc` writes from the settings classes)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"

# What makes a row a bound: a word of its variables' names (`_S` ends a time), or a
# phrase of its meaning.
BOUND_WORDS = {"MAX", "TIMEOUT", "TTL", "BYTES", "SIZE", "LIMIT", "FLOOR", "SKEW", "TRIES",
               "DELIVER", "WAIT", "WAITING", "AGE", "LANES", "QUEUED", "HELD", "INFLIGHT",
               "CONNECTIONS", "OUTAGE", "SEQS", "S"}
BOUND_MEANING = re.compile(r"past (it|them|either)|larger than|at most|more than|after this|"
                           r"this long|slower than|is cut|is closed|expires")

# Rows the rules above take for bounds that are not: each says why.
NOT_BOUNDS = {
    "SPATE_SSE_PING_S": "a period (a keep-alive line on a quiet stream), not a limit on "
                        "anything a client sends or holds",
    "SPATE_HEARTBEAT_S": "a period (how often a worker renews its liveness), not a limit on "
                         "anything a client sends or holds",
    "SPATE_SPECULATIVE_DECODING": "a switch; the 'at most 2 sequences' of its meaning is a "
                                  "fixed rule of the feature, not this setting",
}


@dataclass(frozen=True)
class ConfigRow:
    variables: tuple[str, ...]
    default: str
    process: str
    meaning: str


def configuration_rows() -> list[ConfigRow]:
    """The rows of every table of docs/configuration.md."""
    return table_rows((ROOT / "docs" / "configuration.md").read_text())


def table_rows(markdown: str) -> list[ConfigRow]:
    """The rows of every table whose header starts `| variable |`."""
    lines = markdown.splitlines()
    rows = []
    for start in (index for index, line in enumerate(lines) if line.startswith("| variable |")):
        for line in lines[start + 2:]:
            if not line.startswith("|"):
                break
            cells = split_cells(line)
            if len(cells) != 4:
                raise ValueError(f"a configuration row without 4 cells: {line}")
            rows.append(ConfigRow(tuple(re.findall(r"`([A-Z][A-Z0-9_]*)`", cells[0])),
                                  *cells[1:]))
    return rows


def split_cells(line: str) -> list[str]:
    """A table row's cells; a `|` inside backticks is text, not a border."""
    cells, cell, quoted = [], "", False
    for char in line.strip().strip("|"):
        if char == "`":
            quoted = not quoted
        if char == "|" and not quoted:
            cells.append(cell.strip())
            cell = ""
        else:
            cell += char
    return [*cells, cell.strip()]


def is_bound(row: ConfigRow) -> bool:
    return (any(BOUND_WORDS & set(name.split("_")) for name in row.variables)
            or BOUND_MEANING.search(row.meaning) is not None)


def bound_settings() -> list[str]:
    return sorted(name for row in configuration_rows() if is_bound(row)
                  for name in row.variables if name not in NOT_BOUNDS)


def files_of_tests() -> dict[Path, str]:
    here = Path(__file__).resolve()
    return {path: path.read_text(errors="replace") for path in sorted(TESTS.rglob("*.py"))
            if path.resolve() != here}


def named_in(setting: str, text: str) -> bool:
    field = setting.removeprefix("SPATE_").lower()
    return (re.search(rf"\b{setting}\b", text) is not None
            or re.search(rf"\b{field}\s*=", text) is not None)


def test_the_table_is_read() -> None:
    rows = configuration_rows()
    names = {name for row in rows for name in row.variables}
    # Rows of every kind, among them bounds, settings that are not, and shared rows.
    assert {"SPATE_MAX_BODY_BYTES", "SPATE_NATS_URL", "SPATE_GRAMMAR_TIMEOUT_S",
            "SPATE_GRAMMAR_MEMORY_BYTES"} <= names
    assert all(row.variables and row.process for row in rows)
    assert "SPATE_HTTP_MAX_HEAD_BYTES" in bound_settings()
    assert "SPATE_NATS_URL" not in bound_settings()
    # Every table's rows: the API's, the worker's, and those read outside the settings.
    assert {"SPATE_MAX_INFLIGHT", "SPATE_MAX_NUM_SEQS", "TORCH_SPEC"} <= names


def test_every_exception_is_a_row_the_rules_call_a_bound() -> None:
    bounds = {name for row in configuration_rows() if is_bound(row) for name in row.variables}
    assert set(NOT_BOUNDS) <= bounds, set(NOT_BOUNDS) - bounds


@pytest.mark.parametrize("setting", bound_settings())
def test_every_bound_has_a_test(setting: str) -> None:
    files = files_of_tests()
    naming = [path for path, text in files.items() if named_in(setting, text)]
    assert naming, (f"{setting} is a bound in the configuration table, and no test "
                    f"names it: add one that goes past it")
