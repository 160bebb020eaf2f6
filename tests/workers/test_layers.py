"""The worker's layers stay visible: the model side (workers/model/), the engine
(workers/engine/) and output shaping (workers/output/) never reach up into the process
code at the top of workers/, the model side never reaches into the engine, and the
engine never into output shaping."""

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
