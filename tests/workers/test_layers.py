"""The worker's layers stay visible: the model side (workers/model/), the engine
(workers/engine/) and output shaping (workers/output/) never reach up into the process
code at the top of workers/, the model side never reaches into the engine, and the
engine never into output shaping. Within the engine, output shaping and the process code,
no modules import one another in a loop, not even for type annotations alone."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

WORKERS = Path(__file__).resolve().parents[2] / "workers"

# Each layer and the workers.* packages it may import.
ALLOWED = {
    "model": ("workers.model",),
    "engine": ("workers.model", "workers.engine"),
    "output": ("workers.model", "workers.engine", "workers.output"),
}
# The folders whose modules must not import one another in a loop ("" is the process code
# at the top of workers/). Not yet workers/model/: its forward pass, weights and
# quantized layers still import one another.
WITHOUT_LOOPS = ("", "engine", "output")


def imported_modules(path: Path) -> list[str]:
    names: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            # Lazy exports name their modules as strings (import_module).
            if node.value.startswith("workers.") and " " not in node.value:
                names.append(node.value)
    return names


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_layer_imports_only_itself_and_below(layer: str) -> None:
    allowed = ALLOWED[layer]
    offending = [
        f"{path.relative_to(WORKERS.parent)}: {name}"
        for path in sorted((WORKERS / layer).rglob("*.py"))
        for name in imported_modules(path)
        if (name == "workers" or name.startswith("workers."))
        and not any(name == root or name.startswith(root + ".") for root in allowed)
    ]
    assert not offending, offending


def test_output_shaping_sits_under_workers_output() -> None:
    for stem in ("tool_calls", "tool_prompt", "tool_call_events", "structured_output",
                 "step_events"):
        assert (WORKERS / "output" / f"{stem}.py").is_file()
        assert not (WORKERS / f"{stem}.py").exists()


def test_model_side_sits_under_workers_model() -> None:
    for stem in ("tokenizer", "detokenizer", "chat_template", "model_profile", "host"):
        assert (WORKERS / "model" / f"{stem}.py").is_file()
        assert not (WORKERS / f"{stem}.py").exists()


def module_name(path: Path) -> str:
    parts = path.relative_to(WORKERS.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(folder: str) -> dict[str, set[str]]:
    """Each module of `folder` (its own files, not those of its subfolders) and the
    modules of the same folder it imports: at the top, inside functions, under
    TYPE_CHECKING or named as a lazy export's string."""
    paths = sorted((WORKERS / folder).glob("*.py"))
    names = {module_name(path) for path in paths}
    graph: dict[str, set[str]] = {}
    for path in paths:
        imported: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                # `from workers.engine import sequence` imports the module itself.
                imported.update(f"{node.module}.{alias.name}" for alias in node.names)
        imported.update(imported_modules(path))
        graph[module_name(path)] = (imported & names) - {module_name(path)}
    return graph


def import_loop(graph: dict[str, set[str]]) -> list[str]:
    """One loop of imports in `graph` as the modules along it, the first repeated at
    the end; empty when there is none."""
    done: set[str] = set()
    path: list[str] = []

    def visit(module: str) -> list[str]:
        if module in path:
            return [*path[path.index(module):], module]
        if module in done:
            return []
        path.append(module)
        for imported in sorted(graph[module]):
            if loop := visit(imported):
                return loop
        path.pop()
        done.add(module)
        return []

    for module in sorted(graph):
        if loop := visit(module):
            return loop
    return []


@pytest.mark.parametrize("folder", WITHOUT_LOOPS)
def test_no_import_loops_type_only_imports_included(folder: str) -> None:
    assert import_loop(import_graph(folder)) == []


def test_the_loop_check_sees_type_only_imports() -> None:
    """sequence.py imports its state's types for annotations alone; a graph without them
    would pass the check above without reading them."""
    graph = import_graph("engine")
    assert {"workers.engine.answer_grammar", "workers.engine.output_state",
            "workers.engine.draft_state"} <= graph["workers.engine.sequence"]
    assert import_loop({**graph, "workers.engine.draft_state": {"workers.engine.sequence"}})

