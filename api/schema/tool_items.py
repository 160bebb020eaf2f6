"""The input items of calls to tools other than functions, and of their outputs: custom
tool calls and the client-run built-ins (`local_shell`, `shell`, `apply_patch`). A call
joins the assistant turn that made it, written as the model wrote it; an output becomes a
tool turn (api/lowering/messages.py)."""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, Tag

from api.schema.model_base import StrictModel
from events import ToolCall
from events.builtin_tools import BuiltinKind

ItemStatus = Literal["in_progress", "completed", "incomplete"]


class _Loose(StrictModel):
    """A nested object the client echoes back from an earlier output: only the fields
    the prompt needs are read, the rest (callers, environments) ride along."""

    model_config = ConfigDict(extra="allow")


class CustomToolCallItem(StrictModel):
    type: Literal["custom_tool_call"]
    call_id: str = Field(min_length=1)
    name: str = Field(min_length=1)
    input: str
    namespace: str | None = None
    id: str | None = None
    caller: dict[str, Any] | None = None

    def tool_call(self) -> ToolCall:
        name = f"{self.namespace}.{self.name}" if self.namespace else self.name
        return ToolCall(call_id=self.call_id, name=name, arguments=self.input, kind="custom")


class _TextPart(StrictModel):
    type: Literal["input_text"]
    text: str


class CustomToolCallOutputItem(StrictModel):
    type: Literal["custom_tool_call_output"]
    call_id: str = Field(min_length=1)
    output: str | list[_TextPart]
    id: str | None = None

    def answered(self) -> str:
        return self.call_id

    def text(self) -> str:
        return self.output if isinstance(self.output, str) else "".join(p.text for p in self.output)


class LocalShellAction(_Loose):
    type: Literal["exec"]
    command: list[str]
    env: dict[str, str] = Field(default_factory=dict)
    timeout_ms: int | None = None
    working_directory: str | None = None
    user: str | None = None


class LocalShellCallItem(StrictModel):
    type: Literal["local_shell_call"]
    id: str = Field(min_length=1)
    call_id: str = Field(min_length=1)
    action: LocalShellAction
    status: ItemStatus

    def tool_call(self) -> ToolCall:
        arguments = _present({"command": self.action.command, "timeout_ms": self.action.timeout_ms,
                              "working_directory": self.action.working_directory})
        return _builtin_call("local_shell", self.call_id, arguments)


class LocalShellCallOutputItem(StrictModel):
    """Its `id` is not its own: it names the local_shell_call item it answers, so it is
    no item id (two items of one input may carry it). The store keeps it under an id of
    its own with that call's item id in `call_id`."""

    type: Literal["local_shell_call_output"]
    call_item_id: str = Field(alias="id", min_length=1)
    output: str
    status: ItemStatus | None = None
    call_id: str | None = None

    def answered(self) -> str:
        return self.call_id or self.call_item_id

    def text(self) -> str:
        return self.output


class ShellAction(_Loose):
    commands: list[str]
    timeout_ms: int | None = None
    max_output_length: int | None = None


class ShellCallItem(StrictModel):
    type: Literal["shell_call"]
    call_id: str = Field(min_length=1)
    action: ShellAction
    id: str | None = None
    status: ItemStatus | None = None
    caller: dict[str, Any] | None = None
    environment: dict[str, Any] | None = None

    def tool_call(self) -> ToolCall:
        arguments = _present({"commands": self.action.commands, "timeout_ms": self.action.timeout_ms})
        return _builtin_call("shell", self.call_id, arguments)


class ShellOutcome(_Loose):
    type: Literal["exit", "timeout"]
    exit_code: int | None = None


class ShellOutputPart(_Loose):
    stdout: str = ""
    stderr: str = ""
    outcome: ShellOutcome


class ShellCallOutputItem(StrictModel):
    type: Literal["shell_call_output"]
    call_id: str = Field(min_length=1)
    output: list[ShellOutputPart]
    id: str | None = None
    max_output_length: int | None = None
    status: ItemStatus | None = None
    caller: dict[str, Any] | None = None

    def answered(self) -> str:
        return self.call_id

    def text(self) -> str:
        return json.dumps([part.model_dump(exclude_none=True) for part in self.output],
                          ensure_ascii=False)


class PatchOperation(_Loose):
    type: Literal["create_file", "update_file", "delete_file"]
    path: str
    diff: str | None = None


class ApplyPatchCallItem(StrictModel):
    type: Literal["apply_patch_call"]
    call_id: str = Field(min_length=1)
    operation: PatchOperation
    status: Literal["in_progress", "completed"]
    id: str | None = None
    caller: dict[str, Any] | None = None

    def tool_call(self) -> ToolCall:
        operation = self.operation
        return _builtin_call("apply_patch", self.call_id, _present(
            {"type": operation.type, "path": operation.path, "diff": operation.diff}))


class ApplyPatchCallOutputItem(StrictModel):
    type: Literal["apply_patch_call_output"]
    call_id: str = Field(min_length=1)
    status: Literal["completed", "failed"]
    output: str | None = None
    id: str | None = None
    caller: dict[str, Any] | None = None

    def answered(self) -> str:
        return self.call_id

    def text(self) -> str:
        return f"{self.status}: {self.output}" if self.output else self.status


def _present(values: dict[str, Any]) -> dict[str, Any]:
    return {name: value for name, value in values.items() if value is not None}


def _builtin_call(kind: BuiltinKind, call_id: str, arguments: dict[str, Any]) -> ToolCall:
    # Written back as the model wrote it: a call of the tool named by its type.
    return ToolCall(call_id=call_id, name=kind, kind=kind,
                    arguments=json.dumps(arguments, ensure_ascii=False))


ToolCallItem = (CustomToolCallItem | LocalShellCallItem | ShellCallItem | ApplyPatchCallItem)
ToolOutputItem = (CustomToolCallOutputItem | LocalShellCallOutputItem | ShellCallOutputItem
                  | ApplyPatchCallOutputItem)

TOOL_ITEM_MODELS: dict[str, type[StrictModel]] = {
    "custom_tool_call": CustomToolCallItem,
    "custom_tool_call_output": CustomToolCallOutputItem,
    "local_shell_call": LocalShellCallItem,
    "local_shell_call_output": LocalShellCallOutputItem,
    "shell_call": ShellCallItem,
    "shell_call_output": ShellCallOutputItem,
    "apply_patch_call": ApplyPatchCallItem,
    "apply_patch_call_output": ApplyPatchCallOutputItem,
}
TOOL_ITEM_TAGS = {kind: model.__name__ for kind, model in TOOL_ITEM_MODELS.items()}
# The id a stored item gets when the client sent none.
TOOL_ITEM_ID_PREFIX = {"custom_tool_call": "ctc", "custom_tool_call_output": "ctco",
                       "local_shell_call": "lsc", "local_shell_call_output": "lsco",
                       "shell_call": "sc", "shell_call_output": "sco",
                       "apply_patch_call": "apc", "apply_patch_call_output": "apco"}
# The union members input_items.py adds to its own, tagged by class name.
TaggedToolItem = (
    Annotated[CustomToolCallItem, Tag("CustomToolCallItem")]
    | Annotated[CustomToolCallOutputItem, Tag("CustomToolCallOutputItem")]
    | Annotated[LocalShellCallItem, Tag("LocalShellCallItem")]
    | Annotated[LocalShellCallOutputItem, Tag("LocalShellCallOutputItem")]
    | Annotated[ShellCallItem, Tag("ShellCallItem")]
    | Annotated[ShellCallOutputItem, Tag("ShellCallOutputItem")]
    | Annotated[ApplyPatchCallItem, Tag("ApplyPatchCallItem")]
    | Annotated[ApplyPatchCallOutputItem, Tag("ApplyPatchCallOutputItem")]
)
