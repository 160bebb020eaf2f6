"""How tools and earlier tool turns reach a chat template.

A template that renders `tools` itself and writes calls in a markup spate parses (hermes,
Llama 3 JSON, Mistral's [TOOL_CALLS]: workers/output/tool_call_formats.py) gets them as
Hugging Face's apply_chat_template passes them: tool definitions, assistant turns with
`tool_calls`, and `tool` turns. Call ids are nine letters and digits, derived from spate's
own, since Mistral's templates refuse any other. Any other template (SmolLM2's knows nothing
of tools) gets the tools described in the system prompt, the way hermes-format templates
describe them, and earlier calls and results written out in that same text form, so the
model sees one convention throughout.
"""

from __future__ import annotations

import hashlib
import json
import string
from typing import Any

from events import ChatMessage, RequestAccepted, ToolDefinition
from workers.model.chat_template import ChatTemplate
from workers.output.custom_tool_calls import custom_block
from workers.output.tool_call_formats import FORMATS, ToolCallFormat
from workers.output.tool_call_formats import tool_call_format as format_named

TOOLS_PROMPT = """# Tools

You may call one or more functions to assist with the user query.

You are provided with function signatures within <tools></tools> XML tags:
<tools>
{tools}
</tools>

For each function call, return a json object with function name and arguments within \
<tool_call></tool_call> XML tags:
<tool_call>
{{"name": <function-name>, "arguments": <args-json-object>}}
</tool_call>"""

CUSTOM_TOOLS_PROMPT = """# Custom tools

These tools take plain text, not JSON:
{tools}

To call one, write its input inside a custom_tool_call block:
<custom_tool_call name="<tool-name>">
<input>
</custom_tool_call>"""

_PROBE_TOOL = {"type": "function", "function": {"name": "probe_tool_rendering", "parameters": {}}}


def renders_tools(template: ChatTemplate) -> bool:
    """Whether the template writes the tools it is given into the prompt."""
    messages = [{"role": "user", "content": "x"}]
    try:
        return template.render(messages, tools=[_PROBE_TOOL]) != template.render(messages)
    except ValueError:
        return False


class ToolPrompt:
    """Turns a request's messages and tools into the template's messages and tools."""

    def __init__(self, template: ChatTemplate, tool_call_format: str | None) -> None:
        # Natively only in a markup spate parses and constrains; hermes written out otherwise.
        self.native = tool_call_format in FORMATS and renders_tools(template)
        self.format: ToolCallFormat = format_named(tool_call_format if self.native else None)

    def render_inputs(
        self, request: RequestAccepted
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
        # With tool_choice "none" the model is not offered the tools at all.
        offered = request.tools if request.tool_choice != "none" else ()
        tools = [_tool_json(tool) for tool in offered if tool.kind != "custom"]
        customs = [_custom_json(tool) for tool in offered if tool.kind == "custom"]
        if self.native:
            messages = [_native_message(message) for message in request.messages]
        else:
            messages = _written_out(request.messages, self.format)
            if tools:
                _add_system_prompt(messages, TOOLS_PROMPT.format(
                    tools="\n".join(json.dumps(tool, ensure_ascii=False) for tool in tools)
                ))
        if customs:
            # No chat template knows custom tools: they are always described in the prompt.
            _add_system_prompt(messages, CUSTOM_TOOLS_PROMPT.format(
                tools="\n".join(json.dumps(tool, ensure_ascii=False) for tool in customs)))
        return messages, (tools or None) if self.native else None


def _tool_json(tool: ToolDefinition) -> dict[str, Any]:
    function: dict[str, Any] = {"name": tool.name}
    if tool.description:
        function["description"] = tool.description
    function["parameters"] = tool.parameters or {"type": "object"}
    return {"type": "function", "function": function}


def _custom_json(tool: ToolDefinition) -> dict[str, Any]:
    described: dict[str, Any] = {"name": tool.name}
    if tool.description:
        described["description"] = tool.description
    if tool.input_grammar is not None:
        described["input_format"] = {"syntax": tool.input_grammar.syntax,
                                     "definition": tool.input_grammar.definition}
    return described


def _base_message(message: ChatMessage) -> dict[str, Any]:
    rendered: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.reasoning:
        rendered["reasoning_content"] = message.reasoning
    return rendered


def _native_message(message: ChatMessage) -> dict[str, Any]:
    rendered = _base_message(message)
    customs = [custom_block(call.name, call.arguments) for call in message.tool_calls
               if call.kind == "custom"]
    if customs:  # no template renders these: they are written into the turn's text
        rendered["content"] = "\n".join([message.content, *customs] if message.content else customs)
    calls = [call for call in message.tool_calls if call.kind != "custom"]
    if calls:
        rendered["tool_calls"] = [
            {"id": template_call_id(call.call_id), "type": "function",
             "function": {"name": call.name, "arguments": _arguments_value(call.arguments)}}
            for call in calls
        ]
    if message.tool_call_id is not None:
        rendered["tool_call_id"] = template_call_id(message.tool_call_id)
    return rendered


_ID_ALPHABET = string.ascii_letters + string.digits


def template_call_id(call_id: str) -> str:
    """Nine letters and digits standing for `call_id`: the same on every render, so a
    call and its result still match and a cached prefix stays a prefix."""
    number = int.from_bytes(hashlib.sha256(call_id.encode()).digest()[:8], "big")
    digits = []
    for _ in range(9):
        number, digit = divmod(number, len(_ID_ALPHABET))
        digits.append(_ID_ALPHABET[digit])
    return "".join(digits)


def _arguments_value(arguments: str) -> Any:
    # Templates write arguments with `tojson`, so they expect the object, not its text.
    try:
        return json.loads(arguments)
    except json.JSONDecodeError:
        return arguments


def _written_out(
    messages: tuple[ChatMessage, ...], call_format: ToolCallFormat
) -> list[dict[str, Any]]:
    rendered: list[dict[str, Any]] = []
    for message in messages:
        if message.role == "tool":
            response = f"<tool_response>\n{message.content}\n</tool_response>"
            if rendered and rendered[-1].get("tool_results"):
                rendered[-1]["content"] += "\n" + response
            else:
                rendered.append({"role": "user", "content": response, "tool_results": True})
            continue
        current = _base_message(message)
        if message.tool_calls:
            calls = [custom_block(call.name, call.arguments) if call.kind == "custom"
                     else call_format.written(call.name, call.arguments)
                     for call in message.tool_calls]
            current["content"] = "\n".join([message.content, *calls] if message.content else calls)
        rendered.append(current)
    for turn in rendered:
        turn.pop("tool_results", None)
    return rendered


def _add_system_prompt(messages: list[dict[str, Any]], prompt: str) -> None:
    if messages and messages[0]["role"] in ("system", "developer"):
        messages[0] = {**messages[0], "content": f"{messages[0]['content']}\n\n{prompt}"}
    else:
        messages.insert(0, {"role": "system", "content": prompt})
