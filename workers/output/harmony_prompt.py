"""A request as a harmony conversation (workers/model/harmony.py), the way gpt-oss was
trained to read one:

- a system message with the reasoning effort (`reasoning.effort`: none and minimal read as
  low, xhigh and max as high; absent: medium, harmony's default), the knowledge cutoff and
  the request's date (the day it was accepted, so a resumed response renders the same);
- a developer message with the leading system and developer messages as its instructions
  and the function tools in harmony's `functions` namespace (a namespace tool's functions
  in their own namespace, called as `namespace.name`); client-run built-ins (`shell`,
  `apply_patch`, ...) are functions with their fixed schemas;
- assistant turns as harmony messages: reasoning on `analysis`, the answer on `final` (on
  `commentary` when the turn also calls tools, where it is a preamble), each call on
  `commentary` to `functions.NAME` with `<|constrain|>json`; tool results from
  `functions.NAME` to the assistant.

gpt-oss's built-in `browser` and `python` tools are never offered: the server runs no tool
(SPATE_SERVER_TOOLS), so a request's web_search or code_interpreter never reaches here.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from events import RequestAccepted, ToolDefinition
from workers.model.harmony import (
    DEFAULT_MODEL_IDENTITY,
    JSON_CONTENT_TYPE,
    DeveloperContent,
    HarmonyMessage,
    HarmonyPrompt,
    SystemContent,
    render_for_completion,
)
from workers.model.harmony_tools import HarmonyTool, ToolNamespace

EFFORTS = {"none": "low", "minimal": "low", "low": "low", "medium": "medium", "high": "high",
           "xhigh": "high", "max": "high"}
FUNCTIONS = "functions"


class HarmonyRequestError(ValueError):
    """The request cannot be written as a harmony conversation; `param` names the field."""

    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.param = param


def reasoning_effort(request: RequestAccepted) -> str:
    asked = request.reasoning_effort or request.chat_template_kwargs.get("reasoning_effort")
    if asked is None:
        return "medium"
    if not isinstance(asked, str) or asked.lower() not in EFFORTS:
        raise HarmonyRequestError(f"Unknown reasoning effort {asked!r}.", "reasoning.effort")
    return EFFORTS[asked.lower()]


def recipient(name: str, tools: tuple[ToolDefinition, ...]) -> str:
    """Where a call to `name` is addressed: a namespace tool's own `namespace.name`, any
    other function inside `functions`."""
    if any(tool.name == name and tool.namespace for tool in tools):
        return name
    return f"{FUNCTIONS}.{name}"


def harmony_conversation(request: RequestAccepted) -> list[HarmonyMessage]:
    kwargs = request.chat_template_kwargs
    date = datetime.fromtimestamp(request.created_at, timezone.utc).strftime("%Y-%m-%d")
    system = SystemContent(
        reasoning_effort=reasoning_effort(request),
        model_identity=_model_identity(kwargs),
        conversation_start_date=date,
    )
    messages = list(request.messages)
    instructions = []
    while messages and messages[0].role in ("system", "developer"):
        instructions.append(messages.pop(0).content)
    tools = _namespaces(request)
    conversation = [HarmonyMessage("system", system)]
    if instructions or tools:
        conversation.append(HarmonyMessage("developer", DeveloperContent(
            "\n\n".join(instructions) if instructions else None, tools)))
    # The call each tool result answers, by call id.
    called: dict[str, str] = {}
    for message in messages:
        if message.role in ("system", "developer"):
            conversation.append(HarmonyMessage("developer", message.content))
        elif message.role == "user":
            conversation.append(HarmonyMessage("user", message.content))
        elif message.role == "tool":
            name = called.get(message.tool_call_id or "")
            if name is None:
                raise HarmonyRequestError(
                    f"No function call with call_id {message.tool_call_id!r} comes before its "
                    "output.", "input")
            conversation.append(HarmonyMessage("tool", message.content, name=name,
                                               channel="commentary", recipient="assistant"))
        else:
            if message.reasoning:
                conversation.append(HarmonyMessage("assistant", message.reasoning,
                                                   channel="analysis"))
            if message.content:
                channel = "commentary" if message.tool_calls else "final"
                conversation.append(HarmonyMessage("assistant", message.content, channel=channel))
            for call in message.tool_calls:
                to = recipient(call.name, request.tools)
                called[call.call_id] = to
                conversation.append(HarmonyMessage(
                    "assistant", call.arguments, channel="commentary", recipient=to,
                    content_type=JSON_CONTENT_TYPE))
    return conversation


def render_request(request: RequestAccepted) -> HarmonyPrompt:
    return render_for_completion(harmony_conversation(request))


def _model_identity(kwargs: dict[str, Any]) -> str:
    """The template's `model_identity` keyword, as the real gpt-oss template takes it."""
    identity = kwargs.get("model_identity", DEFAULT_MODEL_IDENTITY)
    if not isinstance(identity, str):
        raise HarmonyRequestError("model_identity must be a string.", "chat_template_kwargs")
    return identity


def _namespaces(request: RequestAccepted) -> tuple[ToolNamespace, ...]:
    """The tools offered (none with tool_choice "none"), grouped by namespace."""
    if request.tool_choice == "none":
        return ()
    grouped: dict[str, list[HarmonyTool]] = {}
    for tool in request.tools:
        if tool.kind == "custom":
            raise HarmonyRequestError(
                f"Custom tool {tool.name!r}: harmony calls take JSON arguments; declare it as "
                "a function tool.", tool.param)
        namespace = tool.namespace or FUNCTIONS
        name = tool.name.removeprefix(f"{tool.namespace}.") if tool.namespace else tool.name
        grouped.setdefault(namespace, []).append(
            HarmonyTool(name, tool.description or "", _parameters(tool.parameters)))
    return tuple(ToolNamespace(name, None, tuple(tools)) for name, tools in grouped.items())


def _parameters(parameters: dict[str, Any] | None) -> dict[str, Any]:
    # Any JSON object where none is given: the arguments are still an object.
    return parameters if parameters is not None else {"type": "object"}

