"""ChatTemplate: renders like transformers' apply_chat_template; SmolLM2's thinking variant."""

from __future__ import annotations

import json

import pytest

from workers.model.chat_template import ChatTemplate, ChatTemplateError, thinking_variant

CONVERSATIONS = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [
        {"role": "system", "content": "Answer in French."},
        {"role": "user", "content": "Capital of Italy?"},
        {"role": "assistant", "content": "Rome."},
        {"role": "user", "content": "And 🇫🇷?"},
    ],
]


@pytest.mark.parametrize("messages", CONVERSATIONS)
@pytest.mark.parametrize("add_generation_prompt", [True, False])
def test_renders_as_transformers_does(smollm2, hf_gguf_tokenizer, messages, add_generation_prompt):
    expected = hf_gguf_tokenizer.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=add_generation_prompt
    )
    rendered = smollm2.chat_template.render(messages, add_generation_prompt=add_generation_prompt)
    assert rendered == expected


def test_thinking_variant_opens_a_think_block_only_when_asked(smollm2):
    messages = CONVERSATIONS[0]
    plain = smollm2.chat_template.render(messages)
    assert plain.endswith("<|im_start|>assistant\n")
    assert smollm2.chat_template.render(messages, enable_thinking=False) == plain
    thinking = smollm2.chat_template.render(messages, enable_thinking=True)
    assert thinking == plain + "<think>\n"
    via_kwargs = smollm2.chat_template.render(
        messages, chat_template_kwargs={"enable_thinking": True}
    )
    assert via_kwargs == thinking
    assert smollm2.profile.prompt_opens_reasoning(thinking)
    assert not smollm2.profile.prompt_opens_reasoning(plain)
    no_prompt = smollm2.chat_template.render(
        messages, add_generation_prompt=False, enable_thinking=True
    )
    assert "<think>" not in no_prompt


def test_thinking_variant_keeps_the_base_output_byte_for_byte():
    # Jinja drops one trailing newline of a template; the variant must not bring it back.
    source = "{% for m in messages %}{{ m['content'] }}\n{% endfor %}END\n"
    base = ChatTemplate(source)
    variant = ChatTemplate(thinking_variant(source, "<think>"))
    messages = [{"role": "user", "content": "x"}]
    assert variant.render(messages) == base.render(messages) == "x\nEND"
    assert variant.render(messages, enable_thinking=True) == "x\nEND<think>\n"


def test_kwargs_and_helpers_reach_the_template():
    source = (
        "{{ bos_token }}{{ reasoning_effort }}|{{ custom }}|{{ tools | tojson }}|"
        "{{ strftime_now('%Y') | length }}{% if enable_thinking %}|think{% endif %}"
    )
    template = ChatTemplate(source, bos_token="<s>", default_kwargs={"custom": "default"})
    tools = [{"type": "function", "name": "é"}]
    rendered = template.render(
        [],
        tools=tools,
        reasoning_effort="high",
        chat_template_kwargs={"custom": "set"},
        enable_thinking=True,
    )
    assert rendered == f"<s>high|set|{json.dumps(tools, ensure_ascii=False)}|4|think"
    assert template.render([], custom="keyword").startswith("<s>|keyword|")


def test_template_errors_are_chat_template_errors():
    template = ChatTemplate("{{ raise_exception('roles must alternate') }}")
    with pytest.raises(ChatTemplateError, match="roles must alternate"):
        template.render([])
    with pytest.raises(ChatTemplateError, match="may not set"):
        ChatTemplate("x").render([], chat_template_kwargs={"messages": []})
    with pytest.raises(ChatTemplateError):
        ChatTemplate("{{ messages[0]['content'] + 'x' }}").render([{"content": None}])
    with pytest.raises(ValueError, match="does not parse"):
        ChatTemplate("{% for %}")


def test_the_sandbox_blocks_attribute_escapes():
    template = ChatTemplate("{{ messages.__class__.__mro__ }}")
    with pytest.raises(ChatTemplateError):
        template.render([])
