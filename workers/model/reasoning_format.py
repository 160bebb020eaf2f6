"""ReasoningFormat: how a model family marks its reasoning and how its template turns
thinking on and off, read from the vocabulary and by rendering the template.

Families differ in three ways, and each is found, not declared per family:
- the markers: `<think>...</think>` (Qwen, DeepSeek-R1 distills, SmolLM3, Granite) or
  `[THINK]...[/THINK]` (Magistral, Ministral-Reasoning);
- who opens the block: the template's generation prompt (R1 distills and QwQ end it with
  `<think>\\n`) or the model;
- the switch: a template keyword (`enable_thinking` for Qwen3, SmolLM3 and llama.cpp's R1
  templates, `thinking` for Granite), or the template's default system prompt (Magistral's
  asks for `[THINK]`), or none (the model always thinks).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from workers.model.chat_template import ChatTemplate

# Reasoning marker pairs, most specific first, with whether the vocabulary alone may vouch
# for them. `[THINK]` tokens are in every recent Mistral vocabulary, reasoning model or
# not, so only a template that writes them counts.
REASONING_MARKERS: tuple[tuple[str, str, bool], ...] = (
    ("<think>", "</think>", True),
    ("[THINK]", "[/THINK]", False),
    ("<|begin_of_thought|>", "<|end_of_thought|>", True),
)

# Template keywords that switch thinking, in the order they are tried.
SWITCH_KEYWORDS = ("enable_thinking", "thinking")

_PROBE_USER = "Probe question?"
_PROBE_SYSTEM = "Probe system prompt."


@dataclass(frozen=True, slots=True)
class ThinkingSwitch:
    """How `enable_thinking` reaches the template: as `keyword`, or (kind "system_prompt")
    through the template's `default_system_prompt`, which asks for reasoning: on, a
    client's own system prompt follows it; off, a client without one gets an empty one."""

    kind: Literal["keyword", "system_prompt"]
    keyword: str = ""
    default_system_prompt: str = ""

    def apply(
        self, messages: list[dict[str, Any]], context: dict[str, Any], enable_thinking: bool
    ) -> list[dict[str, Any]]:
        """The messages to render, with `context` (the template's variables) updated."""
        if self.kind == "keyword":
            context[self.keyword] = enable_thinking
            return messages
        has_system = bool(messages) and messages[0].get("role") == "system"
        if enable_thinking and has_system:
            first = messages[0]
            content = f"{self.default_system_prompt}\n\n{first.get('content') or ''}".rstrip()
            return [{**first, "content": content}, *messages[1:]]
        if not enable_thinking and not has_system:
            return [{"role": "system", "content": ""}, *messages]
        return messages


@dataclass(frozen=True, slots=True)
class ReasoningFormat:
    start: str
    end: str
    # The generation prompt opens the block (with the switch on, when there is one).
    opened_by_template: bool = False
    switch: ThinkingSwitch | None = None
    # Template keywords the model's thinking needs by default: R1 distills and QwQ always
    # think, while llama.cpp's copies of their templates close the block unless asked.
    default_kwargs: Mapping[str, Any] | None = None


def detect_markers(vocab: Mapping[str, int], chat_template: str | None) -> tuple[str, str] | None:
    for start, end, vocabulary_vouches in REASONING_MARKERS:
        if vocabulary_vouches and start in vocab and end in vocab:
            return start, end
        if chat_template and start in chat_template and end in chat_template:
            return start, end
    return None


def detect_reasoning_format(
    vocab: Mapping[str, int], template: ChatTemplate | None
) -> ReasoningFormat | None:
    markers = detect_markers(vocab, template.source if template else None)
    if markers is None:
        return None
    start, end = markers
    if template is None:
        return ReasoningFormat(start, end)
    switch = _keyword_switch(template) or _system_prompt_switch(template, start)
    on_kwargs = {switch.keyword: True} if switch and switch.kind == "keyword" else {}
    opened = _opens(_render(template, [_user()], on_kwargs), start, end)
    default_kwargs = None
    if opened and on_kwargs and not _opens(_render(template, [_user()], {}), start, end):
        default_kwargs = on_kwargs
    return ReasoningFormat(start, end, opened, switch, default_kwargs)


def prompt_opens_block(rendered_prompt: str, start: str, end: str) -> bool:
    """True when the prompt ends inside a think block: its last start marker has no end
    marker after it. (A closed block in an earlier turn does not count.)"""
    position = rendered_prompt.rfind(start)
    return position >= 0 and rendered_prompt.find(end, position) < 0


_opens = prompt_opens_block


def _user() -> dict[str, Any]:
    return {"role": "user", "content": _PROBE_USER}


def _render(template: ChatTemplate, messages: list[dict[str, Any]], kwargs: dict[str, Any]) -> str:
    try:
        return template.render(messages, chat_template_kwargs=kwargs)
    except ValueError:
        return ""


def _keyword_switch(template: ChatTemplate) -> ThinkingSwitch | None:
    for keyword in SWITCH_KEYWORDS:
        if keyword not in template.source:
            continue
        on = _render(template, [_user()], {keyword: True})
        off = _render(template, [_user()], {keyword: False})
        if on and on != off:
            return ThinkingSwitch("keyword", keyword=keyword)
    return None


def _system_prompt_switch(template: ChatTemplate, start: str) -> ThinkingSwitch | None:
    """A default system prompt that asks for reasoning: what the template writes where a
    client's system prompt would go, when the client sends none."""
    with_system = _render(template, [{"role": "system", "content": _PROBE_SYSTEM}, _user()], {})
    without = _render(template, [_user()], {})
    at = with_system.find(_PROBE_SYSTEM)
    if not without or at < 0:
        return None
    after = with_system[at + len(_PROBE_SYSTEM):]
    if not without.startswith(with_system[:at]) or not without.endswith(after):
        return None
    default = without[at:len(without) - len(after)]
    if start not in default:
        return None
    return ThinkingSwitch("system_prompt", default_system_prompt=default)
