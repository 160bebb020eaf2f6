"""Lowering `tools`, `tool_choice`, `text.format` and `structured_outputs` into what the
worker enforces: tool definitions, a lowered tool choice and the answer's constraint."""

from __future__ import annotations

from typing import Any, Literal

from api.schema.client_tools import (
    ApplyPatchTool,
    CustomTool,
    GrammarInput,
    LocalShellTool,
    ShellTool,
)
from api.schema.request import ResponsesRequest
from api.schema.text_format import JSONObjectFormat, JSONSchemaFormat
from api.schema.tools import (
    AllowedTools,
    BuiltinChoice,
    CustomChoice,
    FunctionChoice,
    FunctionTool,
    NamespaceTool,
    ServerToolChoice,
    offered,
)
from events import AnswerConstraint, ToolDefinition
from events.builtin_tools import BUILTIN_DESCRIPTIONS, BUILTIN_SCHEMAS
from events.request import CustomInputGrammar


def tool_definitions(request: ResponsesRequest) -> tuple[ToolDefinition, ...]:
    definitions: list[ToolDefinition] = []
    for index, tool in enumerate(request.tools or []):
        if not offered(tool):
            continue  # runs on the server's side: api/lowering/tool_policy.py
        if isinstance(tool, NamespaceTool):
            definitions.extend(
                _definition(function, f"tools[{index}].tools[{inner}]", tool.name,
                            _joined(tool.description, function.description))
                for inner, function in enumerate(tool.tools)
            )
        elif isinstance(tool, FunctionTool | CustomTool):
            definitions.append(_definition(tool, f"tools[{index}]", None, tool.description))
        elif isinstance(tool, LocalShellTool | ShellTool | ApplyPatchTool):
            definitions.append(ToolDefinition(
                name=tool.type, description=BUILTIN_DESCRIPTIONS[tool.type],
                parameters=BUILTIN_SCHEMAS[tool.type], kind=tool.type, param=f"tools[{index}]",
            ))
    return tuple(definitions)


def _definition(
    tool: FunctionTool | CustomTool, param: str, namespace: str | None, description: str | None
) -> ToolDefinition:
    name = f"{namespace}.{tool.name}" if namespace else tool.name
    if isinstance(tool, FunctionTool):
        return ToolDefinition(name=name, description=description, parameters=tool.parameters,
                              namespace=namespace, param=f"{param}.parameters")
    grammar = None
    if isinstance(tool.format, GrammarInput):
        grammar = CustomInputGrammar(syntax=tool.format.syntax, definition=tool.format.definition)
    return ToolDefinition(name=name, description=description, namespace=namespace, kind="custom",
                          input_grammar=grammar, param=f"{param}.format")


def _joined(namespace_description: str, description: str | None) -> str:
    return f"{namespace_description} {description}" if description else namespace_description


ToolMode = Literal["none", "auto", "required"]


def tool_choice_of(request: ResponsesRequest) -> tuple[ToolMode, tuple[str, ...] | None]:
    """(mode, allowed names): a named function is `required` with only its name allowed;
    None allows every tool. Without tools the mode is `none` whatever was asked."""
    choice = request.tool_choice
    if not tool_definitions(request) or choice == "none":
        return "none", None
    if isinstance(choice, FunctionChoice | CustomChoice | BuiltinChoice):
        return "required", (choice.name,)
    if isinstance(choice, AllowedTools):
        names = [entry.name for entry in choice.tools if not isinstance(entry, ServerToolChoice)]
        return choice.mode, tuple(dict.fromkeys(names))
    return choice or "auto", None


def answer_constraint_of(request: ResponsesRequest) -> AnswerConstraint | None:
    fmt = request.text.format if request.text is not None else None
    if isinstance(fmt, JSONObjectFormat):
        return AnswerConstraint(kind="json_object", param="text.format")
    if isinstance(fmt, JSONSchemaFormat):
        return AnswerConstraint(kind="json_schema", json_schema=fmt.schema_, param="text.format.schema")
    outputs = request.structured_outputs
    if outputs is None:
        return None
    if outputs.json_schema is not None:
        return AnswerConstraint(kind="json_schema", json_schema=outputs.json_schema,
                                param="structured_outputs.json")
    if outputs.regex is not None:
        return AnswerConstraint(kind="regex", pattern=outputs.regex, param="structured_outputs.regex")
    if outputs.choice is not None:
        return AnswerConstraint(kind="choice", choices=tuple(outputs.choice),
                                param="structured_outputs.choice")
    return AnswerConstraint(kind="grammar", grammar=outputs.grammar, param="structured_outputs.grammar")


def tools_echo(request: ResponsesRequest) -> dict[str, Any]:
    """`tools` and `tool_choice` as the Response repeats them: as the client sent them,
    with a function's `parameters` and `strict` always present (the SDK's and the Open
    Responses schema's Response require both). `strict` left out is echoed true: every
    call's arguments are held to the schema by constrained decoding."""
    echo: dict[str, Any] = {}
    if request.tools is not None:
        echo["tools"] = [_tool_echo(tool.model_dump(exclude_unset=True)) for tool in request.tools]
    if request.tool_choice is not None:
        choice = request.tool_choice
        echo["tool_choice"] = choice if isinstance(choice, str) else choice.model_dump()
    return echo


def _tool_echo(tool: dict[str, Any]) -> dict[str, Any]:
    if tool.get("type") == "function":
        return {"parameters": None, **tool, "strict": _unset_true(tool.get("strict"))}
    if tool.get("type") == "namespace":
        return {**tool, "tools": [_tool_echo(inner) for inner in tool["tools"]]}
    return tool


def _unset_true(value: bool | None) -> bool:
    return True if value is None else value
