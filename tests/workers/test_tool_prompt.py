"""Tools and earlier tool turns as a chat template sees them: written out in the system
prompt and the turns for SmolLM2's template, passed through for a hermes template."""

from __future__ import annotations

import json

from events import ChatMessage, RequestAccepted, ToolCall, ToolDefinition
from workers.model.chat_template import ChatTemplate
from workers.output.tool_prompt import ToolPrompt, renders_tools, template_call_id

WEATHER = ToolDefinition(name="get_weather", description="Weather in a city.",
                         parameters={"type": "object", "properties": {"city": {"type": "string"}}})
CALL = ToolCall(call_id="call_1", name="get_weather", arguments='{"city":"Paris"}')
CONVERSATION = (
    ChatMessage(role="user", content="Weather in Paris?"),
    ChatMessage(role="assistant", content="", tool_calls=(CALL,), reasoning="Use the tool."),
    ChatMessage(role="tool", content='{"sky": "sunny"}', tool_call_id="call_1"),
)
# The shape of the hermes templates (Qwen2.5 and others): tools in the system turn, calls
# written from `tool_calls`, results in `tool` turns.
HERMES_TEMPLATE = (
    "{% if tools %}<|im_start|>system\n<tools>{% for t in tools %}{{ t | tojson }}{% endfor %}"
    "</tools><|im_end|>\n{% endif %}"
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}"
    "{% for c in m.tool_calls or [] %}<tool_call>{{ c.function | tojson }}</tool_call>{% endfor %}"
    "<|im_end|>\n{% endfor %}<|im_start|>assistant\n"
)


def request(**fields) -> RequestAccepted:
    return RequestAccepted(response_id="resp_t", seq=0, model="m", messages=CONVERSATION,
                           tools=(WEATHER,), **fields)


def test_smollm2_gets_the_tools_in_its_system_prompt_and_calls_as_text(checkpoint) -> None:
    template = ChatTemplate(checkpoint.chat_template)
    assert not renders_tools(template)
    prompt = ToolPrompt(template, tool_call_format=None)
    messages, tools = prompt.render_inputs(request())
    assert tools is None
    system, user, assistant, result = messages
    assert system["role"] == "system" and "<tools>" in system["content"]
    listed = system["content"].split("<tools>\n")[1].split("\n</tools>")[0]
    assert json.loads(listed)["function"]["name"] == "get_weather"
    assert user == {"role": "user", "content": "Weather in Paris?"}
    assert assistant["content"] == (
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    )
    assert assistant["reasoning_content"] == "Use the tool."
    assert result == {"role": "user", "content": '<tool_response>\n{"sky": "sunny"}\n</tool_response>'}
    rendered = template.render(messages)
    assert rendered.count("<tool_call>") == 3  # the format's description twice, the call once


def test_tool_choice_none_offers_no_tools(checkpoint) -> None:
    prompt = ToolPrompt(ChatTemplate(checkpoint.chat_template), tool_call_format=None)
    messages, tools = prompt.render_inputs(request(tool_choice="none"))
    assert tools is None and messages[0]["role"] == "user"


def test_a_system_turn_gets_the_tools_appended() -> None:
    prompt = ToolPrompt(ChatTemplate(HERMES_TEMPLATE), tool_call_format=None)
    req = request().model_copy(update={"messages": (ChatMessage(role="system", content="Be brief."),
                                                    *CONVERSATION)})
    messages, _ = prompt.render_inputs(req)
    assert messages[0]["content"].startswith("Be brief.\n\n# Tools")


def test_a_hermes_template_renders_tools_and_turns_itself() -> None:
    template = ChatTemplate(HERMES_TEMPLATE)
    assert renders_tools(template)
    prompt = ToolPrompt(template, tool_call_format="hermes")
    messages, tools = prompt.render_inputs(request())
    assert tools == [{"type": "function", "function": {
        "name": "get_weather", "description": "Weather in a city.", "parameters": WEATHER.parameters,
    }}]
    assistant, result = messages[1], messages[2]
    # The call's id, as nine letters and digits (Mistral's templates take no other).
    call_id = template_call_id("call_1")
    assert call_id.isalnum() and len(call_id) == 9 and call_id == template_call_id("call_1")
    assert assistant["tool_calls"] == [{"id": call_id, "type": "function", "function": {
        "name": "get_weather", "arguments": {"city": "Paris"}}}]
    assert (result["role"], result["tool_call_id"]) == ("tool", call_id)
    assert '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>' in (
        template.render(messages, tools=tools)
    )
