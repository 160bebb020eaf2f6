"""Each family's reasoning format, read from its real template: the markers, who opens the
block, the switch `enable_thinking` goes through (rendered as transformers renders the
family's own keyword), and a budget that forces the family's own end marker."""

from __future__ import annotations

from typing import Any

import pytest
from tokenizers import AddedToken

from harness.tiny_checkpoint import build_tokenizer
from tests.workers.model.family_templates import (
    FAMILY_TEMPLATES,
    FamilyTemplate,
    transformers_render,
)
from workers.engine.sampling_params import SamplingParams as Params
from workers.engine.sequence import Sequence
from workers.engine.thinking_budget import ReasoningMarkers, ThinkEvent, ThinkingBudget
from workers.model.chat_template import ChatTemplate
from workers.model.model_profile import ModelProfile, detect_profile
from workers.model.tokenizer import Tokenizer

FAMILIES = {family.name: family for family in FAMILY_TEMPLATES}
QUESTION = [{"role": "user", "content": "How many minutes in a week?"}]

# template -> (markers, opened by the template, switch keyword or "system prompt",
#              default template keywords)
EXPECTED: dict[str, tuple[tuple[str, str] | None, bool, str | None, dict[str, Any]]] = {
    # llama.cpp's copies of the R1 and QwQ templates close the block unless
    # enable_thinking is set: the profile sets it, since these models always think.
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B": (("<think>", "</think>"), True,
                                                 "enable_thinking", {"enable_thinking": True}),
    "Qwen-QwQ-32B": (("<think>", "</think>"), True, "enable_thinking", {"enable_thinking": True}),
    "deepseek-ai-DeepSeek-R1-Distill-Llama-8B": (("<think>", "</think>"), True, None, {}),
    "Qwen-Qwen3-0.6B": (("<think>", "</think>"), False, "enable_thinking", {}),
    "HuggingFaceTB-SmolLM3-3B": (("<think>", "</think>"), False, "enable_thinking", {}),
    "ibm-granite-granite-3.3-2B-Instruct": (("<think>", "</think>"), False, "thinking", {}),
    "mistralai-Ministral-3-14B-Reasoning-2512": (("[THINK]", "[/THINK]"), False,
                                                 "system prompt", {}),
    "Qwen-Qwen2.5-7B-Instruct": (None, False, None, {}),
    "meta-llama-Llama-3.1-8B-Instruct": (None, False, None, {}),
    "Mistral-Small-3.2-24B-Instruct-2506": (None, False, None, {}),
    "microsoft-Phi-3.5-mini-instruct": (None, False, None, {}),
    "google-gemma-2-2b-it": (None, False, None, {}),
}


def profile_of(family: FamilyTemplate, vocab: dict[str, int] | None = None) -> ModelProfile:
    return detect_profile(family.name, 4096, vocab or {}, family.source,
                          bos_token=family.bos_token, eos_token=family.eos_token)


def template_of(family: FamilyTemplate, profile: ModelProfile) -> ChatTemplate:
    """The template as the loader builds it."""
    return ChatTemplate(family.source, family.bos_token, family.eos_token,
                        default_kwargs=dict(profile.default_chat_template_kwargs),
                        thinking_switch=profile.thinking_switch)


@pytest.mark.parametrize("name", list(EXPECTED))
def test_each_family_reasoning_format(name: str) -> None:
    markers, opened, switch, defaults = EXPECTED[name]
    profile = profile_of(FAMILIES[name])
    found = (profile.reasoning_start, profile.reasoning_end) if profile.supports_reasoning else None
    assert found == markers
    assert profile.template_opens_reasoning is opened
    described = profile.thinking_switch
    if switch is None:
        assert described is None
    elif switch == "system prompt":
        assert described is not None and described.kind == "system_prompt"
        assert "[THINK]" in described.default_system_prompt
    else:
        assert described is not None and described.keyword == switch
    assert dict(profile.default_chat_template_kwargs) == defaults


def test_mistral_vocabularies_think_markers_need_the_template() -> None:
    """Every recent Mistral vocabulary has [THINK] tokens; only a template that writes
    them makes the model a reasoning model."""
    vocab = {"[THINK]": 34, "[/THINK]": 35}
    assert not profile_of(FAMILIES["Mistral-Small-3.2-24B-Instruct-2506"], vocab).supports_reasoning
    assert profile_of(FAMILIES["mistralai-Ministral-3-14B-Reasoning-2512"], vocab).supports_reasoning


@pytest.mark.parametrize("name", [
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", "Qwen-QwQ-32B", "Qwen-Qwen3-0.6B",
    "HuggingFaceTB-SmolLM3-3B", "ibm-granite-granite-3.3-2B-Instruct",
])
@pytest.mark.parametrize("thinking", [True, False])
def test_thinking_on_and_off_reach_the_family_keyword(name: str, thinking: bool) -> None:
    family = FAMILIES[name]
    profile = profile_of(family)
    assert profile.thinking_switch is not None
    ours = template_of(family, profile).render(QUESTION, enable_thinking=thinking)
    theirs = transformers_render(family, QUESTION, add_generation_prompt=True,
                                 **{profile.thinking_switch.keyword: thinking})
    assert ours == theirs
    if profile.template_opens_reasoning:
        assert profile.prompt_opens_reasoning(ours) is thinking


def test_the_template_opened_block_is_the_default_of_always_thinking_models() -> None:
    for name in ("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", "Qwen-QwQ-32B",
                 "deepseek-ai-DeepSeek-R1-Distill-Llama-8B"):
        family = FAMILIES[name]
        profile = profile_of(family)
        prompt = template_of(family, profile).render(QUESTION)
        assert prompt.endswith("<think>\n") and profile.prompt_opens_reasoning(prompt)


def test_granite_thinks_only_when_asked() -> None:
    family = FAMILIES["ibm-granite-granite-3.3-2B-Instruct"]
    template = template_of(family, profile_of(family))
    assert "<think></think>" in template.render(QUESTION, enable_thinking=True)
    assert "<think>" not in template.render(QUESTION)
    assert "<think>" not in template.render(QUESTION, enable_thinking=False)


def test_magistral_thinking_goes_through_its_default_system_prompt() -> None:
    family = FAMILIES["mistralai-Ministral-3-14B-Reasoning-2512"]
    profile = profile_of(family)
    template = template_of(family, profile)
    switch = profile.thinking_switch
    assert switch is not None
    default = template.render(QUESTION)
    assert template.render(QUESTION, enable_thinking=True) == default
    assert switch.default_system_prompt in default
    # Off: the client sent no system prompt, so the one asking for [THINK] is left out.
    off = template.render(QUESTION, enable_thinking=False)
    assert off == transformers_render(family, [{"role": "system", "content": ""}, *QUESTION],
                                      add_generation_prompt=True)
    assert "[THINK]" not in off
    # On, with a client's system prompt: the default one comes first.
    own = [{"role": "system", "content": "Be terse."}, *QUESTION]
    on = template.render(own, enable_thinking=True)
    assert on == transformers_render(
        family, [{"role": "system", "content": f"{switch.default_system_prompt}\n\nBe terse."},
                 *QUESTION], add_generation_prompt=True)
    assert "[THINK]" not in template.render(own)


def test_a_budget_forces_the_think_tokens_of_a_mistral_vocabulary() -> None:
    """[THINK] and [/THINK] are special tokens: the markers are their single ids, and the
    budget forces [/THINK] after exactly N tokens of a block the model opened."""
    backend = build_tokenizer(with_think_tokens=False)
    backend.add_special_tokens([AddedToken(token, special=True, normalized=False)
                                for token in ("</s>", "[THINK]", "[/THINK]")])
    tokenizer = Tokenizer(backend, [backend.token_to_id("</s>")])
    markers = ReasoningMarkers.from_strings("[THINK]", "[/THINK]", tokenizer.encode)
    assert markers is not None
    start, end = backend.token_to_id("[THINK]"), backend.token_to_id("[/THINK]")
    assert (markers.start_token_ids, markers.end_token_ids) == ((start,), (end,))
    seq = Sequence("r", 0, [1, 2], Params(thinking_token_budget=3), max_num_tokens=100)
    budget = ThinkingBudget(markers)
    budget.begin(seq, prompt_opens_reasoning=False)
    produced, events = [], []
    for token_id in [5, start, 6, 7, 8, 9, 10]:
        forced = budget.forced_token(seq)
        token_id = forced if forced is not None else token_id
        seq.append_token(token_id)
        produced.append(token_id)
        events.append(budget.observe(seq, token_id))
    assert produced == [5, start, 6, 7, 8, end, 10]
    assert [event for event in events if event] == [ThinkEvent.OPENED, ThinkEvent.CLOSED_BY_BUDGET]
    assert seq.think.num_reasoning_tokens == 3
