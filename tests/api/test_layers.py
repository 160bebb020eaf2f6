"""api/'s parts keep their layers: the body as accepted (schema/) knows nothing of how it
is lowered, lowering/ nothing of the app that holds its objects, the transports
(streaming/, websocket/) nothing of the routes, the guards nothing above them; the parts
import one another in no loop; and api/'s root holds at most ten modules. The top-level
packages' layers are tests/test_layers.py's."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

API = Path(__file__).resolve().parents[2] / "api"

MAX_ROOT_MODULES = 10

# Each part of api/ (a folder, or a module at its root by its stem) and the other parts
# it may import, at the top, inside functions or for annotations alone.
LOW = {"errors", "settings"}
ALLOWED: dict[str, set[str]] = {
    "__init__": set(),
    "__main__": set(),  # the command line's entry point: cli/ starts the app
    "errors": set(),
    "settings": set(),
    "cache_router": set(),  # reads the journal's cache reports, nothing of api/
    # Admission, drain, limits and the HTTP bounds: below everything that checks them.
    "guards": LOW,
    # The body as accepted: pydantic models, the field table, reading JSON bodies.
    "schema": LOW | {"guards"},
    # Body to RequestAccepted; given the store, the journal and the keys, never the app.
    "lowering": LOW | {"guards", "schema"},
    "metrics": {"guards"},
    # The lifespan's objects, typed: above whatever it holds.
    "state": LOW | {"guards", "schema", "lowering", "metrics", "cache_router"},
    "deps": LOW | {"guards", "lowering", "metrics", "state"},
    # The transports: a response's log folded into SSE or JSON, and WebSocket mode.
    "streaming": LOW | {"guards", "metrics", "state"},
    "websocket": LOW | {"guards", "schema", "lowering", "metrics", "state", "streaming"},
    "routes": LOW | {"guards", "schema", "lowering", "metrics", "state", "deps", "streaming",
                     "websocket"},
    "server": LOW | {"guards"},
    "app": LOW | {"guards", "schema", "lowering", "metrics", "state", "cache_router",
                  "routes"},
}


def part_of(path: Path) -> str:
    relative = path.relative_to(API)
    return relative.parts[0] if len(relative.parts) > 1 else relative.stem


def imported_parts(path: Path) -> set[str]:
    """The parts of api/ that `path` imports (`from api.x.y import z`, `import api.x`,
    `from api import x`), lazy imports and TYPE_CHECKING ones included."""
    parts: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            modules = [node.module]
            if node.module == "api":
                parts.update(alias.name for alias in node.names)
        else:
            continue
        parts.update(module.split(".")[1] for module in modules
                     if module.startswith("api."))
    return parts - {part_of(path)}


def sources() -> list[Path]:
    return sorted(API.rglob("*.py"))


def part_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for path in sources():
        graph.setdefault(part_of(path), set()).update(imported_parts(path))
    return graph


def test_every_module_belongs_to_a_part_with_its_arrows() -> None:
    unplaced = sorted({part_of(path) for path in sources()} - set(ALLOWED))
    assert not unplaced, f"api/ parts without a line in ALLOWED: {unplaced}"


@pytest.mark.parametrize("part", sorted(ALLOWED))
def test_a_part_imports_only_the_parts_below_it(part: str) -> None:
    offending = [
        f"{path.relative_to(API.parent)}: api.{name}"
        for path in sources() if part_of(path) == part
        for name in sorted(imported_parts(path) - ALLOWED[part])
    ]
    assert not offending, offending


def test_the_allowed_arrows_make_no_loop() -> None:
    """The parts stack: no part may import, through others, one that may import it."""
    def reaches(start: str, goal: str, seen: set[str]) -> bool:
        for step in ALLOWED.get(start, set()) - seen:
            if step == goal or reaches(step, goal, seen | {step}):
                return True
        return False

    looping = sorted(part for part in ALLOWED if reaches(part, part, set()))
    assert not looping, looping


def test_the_check_reads_real_arrows() -> None:
    graph = part_graph()
    assert {"schema", "guards"} <= graph["lowering"]
    assert {"lowering", "streaming", "state"} <= graph["websocket"]
    assert "schema" not in graph["streaming"]
    assert imported_parts(API / "routes" / "responses.py") >= {"deps", "lowering", "streaming"}


def test_at_most_ten_modules_at_the_root() -> None:
    root = sorted(path.name for path in API.glob("*.py"))
    assert len(root) <= MAX_ROOT_MODULES, root


@pytest.mark.parametrize(("folder", "stems"), [
    ("schema", ("request", "options", "fields", "input_items", "tools", "conversation", "body")),
    ("lowering", ("accept", "request_event", "history", "messages", "constraints")),
    ("websocket", ("protocol", "session", "chains", "response")),
    ("guards", ("admission", "drain", "limits", "http_limits")),
])
def test_each_concern_sits_in_its_folder(folder: str, stems: tuple[str, ...]) -> None:
    missing = [stem for stem in stems if not (API / folder / f"{stem}.py").is_file()]
    assert not missing, missing
