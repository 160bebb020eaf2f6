"""The request event is built once, complete and validated (api/lowering/accept.py `accept`):
nothing in api/ edits a RequestAccepted with `model_copy`, which skips validation.

The check reads the source: a `model_copy` call is on a request event when its receiver
is a name annotated RequestAccepted, a name assigned from a call that returns one (a
function so annotated, or the class itself), a `.event` attribute (BuiltRequest's), or
such a call itself."""

from __future__ import annotations

import ast
from pathlib import Path

API = Path(__file__).resolve().parents[2] / "api"
EVENT = "RequestAccepted"


def _names(node: ast.expr | None) -> set[str]:
    """The names an annotation mentions (`RequestAccepted | None` mentions two)."""
    if node is None:
        return set()
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return _names(ast.parse(node.value, mode="eval").body)
    return {sub.id for sub in ast.walk(node) if isinstance(sub, ast.Name)} | {
        sub.attr for sub in ast.walk(node) if isinstance(sub, ast.Attribute)}


def event_makers(trees: list[ast.Module]) -> set[str]:
    """The functions that return a request event, and the class itself."""
    makers = {EVENT}
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and EVENT in _names(node.returns):
                makers.add(node.name)
    return makers


def _called(node: ast.expr) -> str | None:
    call = node.value if isinstance(node, ast.Await) else node
    if not isinstance(call, ast.Call):
        return None
    func = call.func
    if isinstance(func, ast.Attribute) and func.attr in ("model_validate", "model_construct"):
        func = func.value  # RequestAccepted.model_validate(...)
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None


def _is_event(node: ast.expr, typed: set[str], makers: set[str]) -> bool:
    if isinstance(node, ast.Name):
        return node.id in typed
    if isinstance(node, ast.Attribute) and node.attr == "event":
        return True
    return _called(node) in makers


def _typed_names(function: ast.AST, makers: set[str]) -> set[str]:
    """The names inside `function` that hold a request event."""
    typed: set[str] = set()
    for node in ast.walk(function):
        if isinstance(node, ast.arg) and EVENT in _names(node.annotation):
            typed.add(node.arg)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and EVENT in _names(node.annotation):
            typed.add(node.target.id)
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                pairs = (zip(target.elts, node.value.elts, strict=False)
                         if isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple)
                         else [(target, node.value)])
                for name, value in pairs:
                    if isinstance(name, ast.Name) and _is_event(value, typed, makers):
                        typed.add(name.id)
    return typed


def event_copies(tree: ast.Module, makers: set[str]) -> list[int]:
    """The lines of `tree` where a request event is copied with `model_copy`."""
    lines = []
    for function in ast.walk(tree):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        typed = _typed_names(function, makers)
        for node in ast.walk(function):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "model_copy"
                    and _is_event(node.func.value, typed, makers)):
                lines.append(node.lineno)
    return lines


def test_no_request_event_is_copied_in_api() -> None:
    sources = {path: ast.parse(path.read_text()) for path in sorted(API.rglob("*.py"))}
    makers = event_makers(list(sources.values()))
    assert {"accept", "request_event"} <= makers  # the check sees the builders
    found = [f"{path.relative_to(API.parent)}:{line}"
             for path, tree in sources.items() for line in event_copies(tree, makers)]
    assert found == [], f"RequestAccepted edited with model_copy (build it once): {found}"


def test_the_check_finds_each_way_an_event_was_copied() -> None:
    source = '''
def by_annotation(event: RequestAccepted) -> None:
    event.model_copy(update={"echo": {}})

async def by_builder(body) -> None:
    event = accept(body, "resp_1", owner="shared")
    event = event.model_copy(update={"compaction": None})

def by_attribute(built) -> None:
    fold, event = ResponseFold(), built.event
    event.model_copy(update={"store": False})
    built.event.model_copy()

def not_an_event(request: ResponsesRequest) -> None:
    request.model_copy(update={"input": []})
    request.sampling.model_copy(update={"top_logprobs": None})
'''
    tree = ast.parse(source)
    makers = event_makers([tree]) | {"accept"}
    assert event_copies(tree, makers) == [3, 7, 11, 12]
