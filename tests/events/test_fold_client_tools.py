"""Given a log with a custom tool's call and a built-in's, the fold writes the official
SDK's shapes: a custom_tool_call item whose input streams as custom_tool_call_input
deltas, and a built-in's own item type, added and done once its action is whole."""

from __future__ import annotations

from typing import Any

from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from events import (
    ChatMessage,
    GenerationFinished,
    RequestAccepted,
    TokensGenerated,
    ToolCallEnded,
    ToolCallStarted,
    Usage,
    fold,
)

STREAM_EVENT: TypeAdapter[Any] = TypeAdapter(ResponseStreamEvent)
PATCH = '{"type": "create_file", "path": "notes.txt", "diff": "+hi"}'


def log(*events: Any) -> list[Any]:
    request = RequestAccepted(response_id="resp_t", seq=0, model="m",
                              messages=(ChatMessage(role="user", content="hi"),))
    return [request, *(event.model_copy(update={"response_id": "resp_t", "seq": seq})
                       for seq, event in enumerate(events, start=1))]


def call(kind: str, name: str, call_id: str, *pieces: str, ended: bool = True) -> list[Any]:
    events: list[Any] = [ToolCallStarted(response_id="r", seq=0, call_id=call_id, name=name,
                                         kind=kind)]  # type: ignore[arg-type]
    events += [TokensGenerated(response_id="r", seq=0, channel="tool_call", text=piece)
               for piece in pieces]
    if ended:
        events.append(ToolCallEnded(response_id="r", seq=0, call_id=call_id, arguments="".join(pieces)))
    return events


def finished(reason: str = "stop") -> GenerationFinished:
    return GenerationFinished(response_id="r", seq=0, finish_reason=reason,  # type: ignore[arg-type]
                              usage=Usage(input_tokens=1, output_tokens=5))


def test_a_custom_call_and_a_patch_in_the_sdk_shapes() -> None:
    state = fold(log(*call("custom", "calc", "call_t_0", "12 ", "* 7"),
                     *call("apply_patch", "apply_patch", "call_t_1", PATCH[:20], PATCH[20:]),
                     finished()))
    for event in state.sse_events:
        STREAM_EVENT.validate_python(event)
    types = [event["type"] for event in state.sse_events]
    assert types == [
        "response.created", "response.in_progress",
        "response.output_item.added", "response.custom_tool_call_input.delta",
        "response.custom_tool_call_input.delta", "response.custom_tool_call_input.done",
        "response.output_item.done",
        "response.output_item.added", "response.output_item.done",
        "response.completed",
    ]
    response = Response.model_validate(state.response())
    custom, patch = response.output
    assert (custom.type, custom.name, custom.input) == ("custom_tool_call", "calc", "12 * 7")
    assert patch.type == "apply_patch_call" and patch.status == "completed"
    assert (patch.operation.type, patch.operation.path) == ("create_file", "notes.txt")


def test_shell_calls_become_their_items() -> None:
    state = fold(log(*call("shell", "shell", "call_t_0", '{"commands": ["ls"]}'),
                     *call("local_shell", "local_shell", "call_t_1", '{"command": ["ls", "-l"]}'),
                     finished()))
    shell, local = Response.model_validate(state.response()).output
    assert shell.type == "shell_call" and shell.action.commands == ["ls"]
    assert local.type == "local_shell_call" and local.action.command == ["ls", "-l"]


def test_a_builtin_cut_short_is_incomplete_with_what_parses() -> None:
    state = fold(log(*call("shell", "shell", "call_t_0", '{"commands": ["l', ended=False),
                     finished("length")))
    (shell,) = Response.model_validate(state.response()).output
    assert shell.status == "incomplete" and shell.action.commands == []
