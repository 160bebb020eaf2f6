"""The top-level packages keep their layers (docs/internals.md): only `journal/` talks to
NATS (no other package imports the client or reaches for a journal's `.nc`), imports flow
one way (`events` <- `journal` <- `store` <- `api`; `events` <- `journal` <- `workers`,
which drives `kernels`), and `api`, `events`, `journal` and `store` never import torch or
triton. workers/' own sub-layers are tests/workers/test_layers.py's."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Each package and the spate packages it may import (itself included).
ALLOWED = {
    "events": {"events"},
    "journal": {"events", "journal"},
    "store": {"events", "journal", "store"},
    "api": {"events", "journal", "store", "api"},
    "workers": {"events", "journal", "workers", "kernels"},
    "kernels": {"kernels"},
    # What the tests and the benchmarks share (not shipped): it starts spate as processes
    # and imports none of it, and none of the packages above imports it.
    "harness": {"harness"},
}
SPATE = {
    "events", "journal", "store", "api", "workers", "kernels", "cli", "examples", "tests",
    "harness",
}
# Outside the journal, none of these may talk to NATS.
NO_NATS = ("api", "workers", "store", "events", "cli", "examples")
NO_TORCH = ("api", "events", "journal", "store")


def sources(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


def parsed(path: Path) -> ast.AST:
    return ast.parse(path.read_text(), filename=str(path))


def imported_packages(path: Path) -> set[str]:
    """The top-level package of every absolute import, lazy ones inside functions too."""
    names: set[str] = set()
    for node in ast.walk(parsed(path)):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def where(path: Path) -> str:
    return str(path.relative_to(ROOT))


@pytest.mark.parametrize("package", NO_NATS)
def test_only_the_journal_imports_the_nats_client(package: str) -> None:
    offending = [where(path) for path in sources(package) if "nats" in imported_packages(path)]
    assert not offending, offending


@pytest.mark.parametrize("package", NO_NATS)
def test_only_the_journal_reaches_the_nats_connection(package: str) -> None:
    offending = [
        f"{where(path)}:{node.lineno}"
        for path in sources(package)
        for node in ast.walk(parsed(path))
        if isinstance(node, ast.Attribute) and node.attr == "nc"
    ]
    assert not offending, offending


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_imports_flow_one_way(package: str) -> None:
    offending = [
        f"{where(path)}: {name}"
        for path in sources(package)
        for name in sorted(imported_packages(path) & SPATE)
        # `python -m api` and `python -m workers` are the command line's entry points.
        if name not in ALLOWED[package] and not (path.name == "__main__.py" and name == "cli")
    ]
    assert not offending, offending


@pytest.mark.parametrize("package", NO_TORCH)
def test_the_bus_and_api_side_never_import_torch(package: str) -> None:
    offending = [
        where(path) for path in sources(package)
        if imported_packages(path) & {"torch", "triton"}
    ]
    assert not offending, offending


def test_the_checks_see_what_they_forbid() -> None:
    """The journal itself imports the client and uses `.nc`: a scan that found neither
    there would pass the tests above without reading anything."""
    journal = sources("journal")
    assert any("nats" in imported_packages(path) for path in journal)
    assert any(
        isinstance(node, ast.Attribute) and node.attr == "nc"
        for path in journal for node in ast.walk(parsed(path))
    )
    assert any("torch" in imported_packages(path) for path in sources("workers"))
