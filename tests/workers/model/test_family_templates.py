"""The served families' real chat templates render as transformers' apply_chat_template
renders them: plain turns, history with reasoning, tools, tool calls and tool results, and
the thinking switches; a conversation one refuses, the other refuses too."""

from __future__ import annotations

from typing import Any

import jinja2
import pytest

from tests.workers.model.family_templates import (
    FAMILY_TEMPLATES,
    FamilyTemplate,
    transformers_render,
)
from workers.model.chat_template import ChatTemplate, ChatTemplateError

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city, now.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]},
}}
TIME = {"type": "function", "function": {
    "name": "get_time", "parameters": {"type": "object", "properties": {}},
}}


def _call(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


# Call ids are nine letters and digits, as ToolPrompt writes them: Mistral's templates
# take no other.
CONVERSATIONS: dict[str, tuple[list[dict[str, Any]], list[dict[str, Any]] | None]] = {
    "one turn": ([{"role": "user", "content": "What is 2+2?"}], None),
    "history with reasoning": ([
        {"role": "system", "content": "Answer briefly."},
        {"role": "user", "content": "Capital of Italy?"},
        {"role": "assistant", "content": "Rome.", "reasoning_content": "Italy: Rome."},
        {"role": "user", "content": "And of France? ✨"},
    ], None),
    "tools offered": ([{"role": "user", "content": "Weather in Paris?"}], [WEATHER, TIME]),
    "a call and its result": ([
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "",
         "tool_calls": [_call("a1b2c3d4e", "get_weather", {"city": "Paris"})]},
        {"role": "tool", "content": '{"celsius": 21}', "tool_call_id": "a1b2c3d4e"},
    ], [WEATHER, TIME]),
    "two calls, two results, an answer, a new question": ([
        {"role": "system", "content": "Use the tools."},
        {"role": "user", "content": "Weather and time in Oslo?"},
        {"role": "assistant", "content": "Let me look.", "tool_calls": [
            _call("a1b2c3d4e", "get_weather", {"city": "Oslo"}), _call("f5g6h7i8j", "get_time", {}),
        ]},
        {"role": "tool", "content": "rain", "tool_call_id": "a1b2c3d4e"},
        {"role": "tool", "content": "noon", "tool_call_id": "f5g6h7i8j"},
        {"role": "assistant", "content": "Rain at noon."},
        {"role": "user", "content": "Thanks!"},
    ], [WEATHER, TIME]),
}

SWITCHES: list[dict[str, Any]] = [
    {}, {"enable_thinking": True}, {"enable_thinking": False}, {"thinking": True},
]


def _outcome(render: Any, *args: Any, **kwargs: Any) -> str:
    """The rendered text, or that the template refused the conversation."""
    try:
        return str(render(*args, **kwargs))
    except (ChatTemplateError, jinja2.exceptions.TemplateError):
        return "<refused>"


@pytest.mark.parametrize("family", FAMILY_TEMPLATES, ids=lambda family: family.name)
@pytest.mark.parametrize("conversation", list(CONVERSATIONS))
def test_renders_as_transformers(family: FamilyTemplate, conversation: str) -> None:
    messages, tools = CONVERSATIONS[conversation]
    template = ChatTemplate(family.source, bos_token=family.bos_token, eos_token=family.eos_token)
    for kwargs in SWITCHES:
        for add_generation_prompt in (True, False):
            ours = _outcome(template.render, messages, tools=tools,
                            add_generation_prompt=add_generation_prompt,
                            chat_template_kwargs=kwargs)
            theirs = _outcome(transformers_render, family, messages, tools=tools,
                              add_generation_prompt=add_generation_prompt, **kwargs)
            assert ours == theirs, (kwargs, add_generation_prompt)


def test_the_conversations_reach_the_templates() -> None:
    """Not a parity of refusals: most families render every conversation."""
    rendered = 0
    for family in FAMILY_TEMPLATES:
        template = ChatTemplate(family.source, family.bos_token, family.eos_token)
        for messages, tools in CONVERSATIONS.values():
            rendered += _outcome(template.render, messages, tools=tools) != "<refused>"
    assert rendered >= len(FAMILY_TEMPLATES) * len(CONVERSATIONS) * 3 // 4


def test_template_helpers_match_transformers() -> None:
    family = FamilyTemplate("test", "", "<s>", "</s>")
    source = (
        "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}"
        "{% if loop.index > 5 %}{% break %}{% endif %}{% endfor %}{{ ns.n }}|"
        "{{ dict(a=1, b=[1, 2]) | tojson(separators=(',', ':')) }}|{{ {'é': '<'} | tojson }}|"
        "{{ messages[0].thinking }}|{{ 'tool_calls' in messages[0] }}|{{ documents }}|"
        "{{ tools | tojson(indent=2) }}\n"
        "  {% if true %}\n    kept {% endif %}\n"
    )
    messages = [{"role": "assistant", "content": "x", "reasoning_content": "why",
                 "tool_calls": None}]
    ours = ChatTemplate(source, "<s>", "</s>").render(messages, tools=[WEATHER])
    theirs = _transformers_inline(family, source, messages, [WEATHER])
    assert ours == theirs
    assert ours.startswith("1|{\"a\":1,\"b\":[1,2]}|{\"é\": \"<\"}|why|False|None|")


def _transformers_inline(
    family: FamilyTemplate, source: str, messages: list[dict[str, Any]],
    tools: list[dict[str, Any]],
) -> str:
    from tests.workers.model.family_templates import _hf_tokenizer

    tokenizer = _hf_tokenizer(source, family.bos_token, family.eos_token)
    rendered: str = tokenizer.apply_chat_template(
        messages, tools=tools, tokenize=False, add_generation_prompt=True)
    return rendered


def test_namespaces_refuse_underscore_attributes() -> None:
    template = ChatTemplate("{% set ns = namespace(_x=1) %}{{ ns._x }}")
    with pytest.raises(ChatTemplateError):
        template.render([])
