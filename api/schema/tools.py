"""`tools` and `tool_choice` as spate accepts them: function tools, namespace tools and
the client-run tools of api/schema/client_tools.py (custom tools, local_shell, shell,
apply_patch), offered to the model; and the tools that run on the server's side at OpenAI
(web search, file search, code interpreter, mcp, ...), which spate cannot run: they are
accepted and echoed but never offered, or refused by name when the operator says so
(api/lowering/tool_policy.py)."""

from __future__ import annotations

from typing import Annotated, Any, Literal, get_args

from pydantic import ConfigDict, Discriminator, Field, Tag, field_validator

from api.schema.client_tools import (
    CLIENT_TOOL_TAGS,
    ApplyPatchTool,
    Caller,
    ClientTool,
    CustomTool,
    LocalShellTool,
    ShellTool,
    runs_on_server,
)
from api.schema.model_base import NAME_PATTERN, FieldRejected, StrictModel, tag_by_type

# Tools whose work happens on the server's side in OpenAI's API (OpenAI searches the web,
# runs the code, calls the MCP server): no model served here can be given them.
ServerToolType = Literal[
    "web_search", "web_search_2025_08_26", "web_search_preview", "web_search_preview_2025_03_11",
    "file_search", "code_interpreter", "image_generation", "mcp", "computer",
    "computer_use_preview", "computer_use", "tool_search", "programmatic_tool_calling",
]
SERVER_TOOL_TYPES: tuple[str, ...] = get_args(ServerToolType)
SERVED_TOOL_TYPES = ("function", "namespace", *CLIENT_TOOL_TAGS, *SERVER_TOOL_TYPES)


class FunctionTool(StrictModel):
    model_config = ConfigDict(populate_by_name=True)

    type: Literal["function"]
    name: str = Field(pattern=NAME_PATTERN)
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None
    # No-ops: every function is called directly, offered up front, and its output is
    # whatever the client sends back.
    allowed_callers: list[Caller] | None = None
    defer_loading: bool | None = None
    output_schema: dict[str, Any] | None = None
    async_: bool | None = Field(default=None, alias="async")

    @field_validator("parameters")
    @classmethod
    def _object_schema(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        # The arguments of a call are one JSON object, so a schema must describe one.
        if value is not None and value.get("type", "object") != "object":
            raise ValueError("the parameters schema must describe a JSON object (type 'object')")
        return value


NamespacedTool = Annotated[
    Annotated[FunctionTool, Tag("Function")] | Annotated[CustomTool, Tag("Custom")],
    Discriminator(tag_by_type({"function": "Function", "custom": "Custom"})),
]


class NamespaceTool(StrictModel):
    """Functions and custom tools grouped under a name; the model calls them as
    `<namespace>.<name>`."""

    type: Literal["namespace"]
    name: str = Field(pattern=NAME_PATTERN)
    description: str
    tools: list[NamespacedTool] = Field(min_length=1)


class ServerTool(StrictModel):
    """A tool that runs on the server's side at OpenAI: its settings are kept as sent, for
    the echo, and it is never offered to the model."""

    model_config = ConfigDict(extra="allow")

    type: ServerToolType


Tool = Annotated[
    Annotated[FunctionTool, Tag("Function")]
    | Annotated[NamespaceTool, Tag("Namespace")]
    | ClientTool
    | Annotated[ServerTool, Tag("Server")],
    Discriminator(tag_by_type({"function": "Function", "namespace": "Namespace",
                               **CLIENT_TOOL_TAGS, **dict.fromkeys(SERVER_TOOL_TYPES, "Server")})),
]
AnyTool = FunctionTool | NamespaceTool | CustomTool | LocalShellTool | ShellTool | ApplyPatchTool | ServerTool


def offered(tool: AnyTool) -> bool:
    """Whether the model is offered the tool: not when it runs on the server's side."""
    return not isinstance(tool, ServerTool) and not (
        isinstance(tool, ShellTool) and runs_on_server(tool))


class FunctionChoice(StrictModel):
    type: Literal["function"]
    name: str = Field(min_length=1)


class CustomChoice(StrictModel):
    type: Literal["custom"]
    name: str = Field(min_length=1)


class BuiltinChoice(StrictModel):
    """Forces (or allows) a client-run built-in, named by its type."""

    type: Literal["local_shell", "shell", "apply_patch"]

    @property
    def name(self) -> str:
        return self.type


NamedChoice = FunctionChoice | CustomChoice | BuiltinChoice
_NAMED_CHOICE_TAGS = {"function": "Function", "custom": "Custom", "local_shell": "Builtin",
                      "shell": "Builtin", "apply_patch": "Builtin"}


class ServerToolChoice(StrictModel):
    """An allowed_tools entry naming a server-side tool: allowed, and never callable."""

    model_config = ConfigDict(extra="allow")

    type: ServerToolType


AllowedTool = Annotated[
    Annotated[FunctionChoice, Tag("Function")] | Annotated[CustomChoice, Tag("Custom")]
    | Annotated[BuiltinChoice, Tag("Builtin")] | Annotated[ServerToolChoice, Tag("Server")],
    Discriminator(tag_by_type({**_NAMED_CHOICE_TAGS, **dict.fromkeys(SERVER_TOOL_TYPES, "Server")})),
]


class AllowedTools(StrictModel):
    type: Literal["allowed_tools"]
    mode: Literal["auto", "required"]
    tools: list[AllowedTool] = Field(min_length=1)


ToolChoice = (
    Literal["none", "auto", "required"]
    | Annotated[
        Annotated[FunctionChoice, Tag("Function")] | Annotated[CustomChoice, Tag("Custom")]
        | Annotated[BuiltinChoice, Tag("Builtin")] | Annotated[AllowedTools, Tag("AllowedTools")],
        Discriminator(tag_by_type({**_NAMED_CHOICE_TAGS, "allowed_tools": "AllowedTools"})),
    ]
)


def refuse_unserved_tools(tools: Any, tool_choice: Any) -> None:
    """400s that name the built-in tool type, in `tools` and in `tool_choice`."""
    for index, tool in enumerate(tools if isinstance(tools, list) else []):
        if not isinstance(tool, dict):
            continue
        _refuse_type(tool.get("type"), f"tools[{index}].type", SERVED_TOOL_TYPES)
        if tool.get("type") == "namespace" and isinstance(tool.get("tools"), list):
            for inner, function in enumerate(tool["tools"]):
                if isinstance(function, dict):
                    _refuse_type(function.get("type"), f"tools[{index}].tools[{inner}].type",
                                 ("function", "custom"))
    if isinstance(tool_choice, dict):
        if tool_choice.get("type") in SERVER_TOOL_TYPES:
            raise FieldRejected(
                "tool_choice.type",
                f"tool_choice cannot force the '{tool_choice.get('type')}' tool: it runs on "
                "the server's side, which this server does not offer the model.",
            )
        _refuse_type(tool_choice.get("type"), "tool_choice.type",
                     (*_NAMED_CHOICE_TAGS, "allowed_tools"), what="tool_choice type")
        allowed = tool_choice.get("tools") if tool_choice.get("type") == "allowed_tools" else None
        for index, entry in enumerate(allowed if isinstance(allowed, list) else []):
            if isinstance(entry, dict):
                _refuse_type(entry.get("type"), f"tool_choice.tools[{index}].type",
                             (*_NAMED_CHOICE_TAGS, *SERVER_TOOL_TYPES))


def _refuse_type(
    tool_type: Any, param: str, served: tuple[str, ...], what: str = "tool type"
) -> None:
    if not isinstance(tool_type, str) or tool_type not in served:
        raise FieldRejected(
            param,
            f"The {what} '{tool_type}' is not supported: spate takes "
            f"{' and '.join(repr(t) for t in served)} only.",
        )


def callable_names(tools: list[AnyTool]) -> dict[str, str]:
    """Every tool the model may call, by the name it writes -> the param naming it (a
    built-in is named by its type). Duplicates are a 400 on the later one."""
    names: dict[str, str] = {}
    for index, tool in enumerate(tools):
        if not offered(tool):
            continue
        if isinstance(tool, NamespaceTool):
            entries = [(f"{tool.name}.{function.name}", f"tools[{index}].tools[{inner}].name")
                       for inner, function in enumerate(tool.tools)]
        elif isinstance(tool, FunctionTool | CustomTool):
            entries = [(tool.name, f"tools[{index}].name")]
        else:
            entries = [(tool.type, f"tools[{index}].type")]
        for name, param in entries:
            if name in names:
                raise FieldRejected(param, f"The tool name '{name}' is used twice.")
            names[name] = param
    return names


def check_tool_choice(tool_choice: Any, names: dict[str, str]) -> None:
    """`required`, a named function or allowed_tools need tools that exist."""
    if tool_choice == "required" and not names:
        raise FieldRejected("tool_choice", "tool_choice 'required' needs at least one function in 'tools'.")
    if isinstance(tool_choice, BuiltinChoice) and tool_choice.name not in names:
        raise FieldRejected("tool_choice.type", f"No '{tool_choice.type}' tool is in 'tools'.")
    if isinstance(tool_choice, FunctionChoice | CustomChoice) and tool_choice.name not in names:
        raise FieldRejected("tool_choice.name", f"No {tool_choice.type} tool named "
                            f"'{tool_choice.name}' is in 'tools'.")
    if isinstance(tool_choice, AllowedTools):
        if tool_choice.mode == "required" and not any(
            not isinstance(entry, ServerToolChoice) for entry in tool_choice.tools
        ):
            raise FieldRejected("tool_choice.tools",
                                "allowed_tools in 'required' mode needs at least one function.")
        for index, entry in enumerate(tool_choice.tools):
            if not isinstance(entry, ServerToolChoice) and entry.name not in names:
                raise FieldRejected(f"tool_choice.tools[{index}].name",
                                    f"No function named '{entry.name}' is in 'tools'.")
